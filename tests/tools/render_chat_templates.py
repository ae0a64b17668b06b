#!/usr/bin/env python3
"""Writes the expected outputs of pagoda's Jinja engine, rendered by jinja2.

The reference is Hugging Face transformers' setup: ImmutableSandboxedEnvironment
(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension, tojson
overridden as json.dumps(ensure_ascii=False, indent, separators, sort_keys) and
the globals raise_exception and strftime_now. strftime_now formats a fixed time
(NOW, noon UTC, so the date is the same in any time zone within +-11h).

Writes two files:
  tests/data/chat_template_golden.json: every fixture template x conversation
    x add_generation_prompt (fixtures referenced by file name), plus the
    well-known templates of jinja_cases.EXTRA_TEMPLATES (source embedded);
  tests/data/jinja_language_golden.json: small templates, one construct each.

Usage: tests/tools/render_chat_templates.py [--fixtures DIR] [--out-dir DIR]
(python3-jinja2, Debian package; scripts/install-deps.sh installs it).
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_cases import CONVERSATIONS, EXTRA_TEMPLATES, LANGUAGE_CASES  # noqa: E402

NOW = 1721995200  # 2024-07-26 12:00:00 UTC
BOS = "<BOS>"
EOS = "<EOS>"


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(NOW).strftime(format)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    """Returns {"output": text} or {"error": kind, "message": text}."""
    try:
        template = env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": "syntax", "message": str(e), "line": e.lineno}
    except jinja2.exceptions.TemplateAssertionError as e:
        return {"error": "syntax", "message": str(e), "line": e.lineno}
    except SyntaxError as e:  # e.g. 'break' outside a loop, from Python's compiler
        return {"error": "syntax", "message": str(e)}
    try:
        return {"output": template.render(**context)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": "raise", "message": e.message}
        return {"error": "runtime", "message": str(e)}
    except Exception as e:  # TypeError etc. from Python operators
        return {"error": "runtime", "message": f"{type(e).__name__}: {e}"}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", default=os.environ.get(
        "PAGODA_FIXTURES", os.path.join(root, "..", "shared", "fixtures")))
    parser.add_argument("--out-dir", default=os.path.join(root, "tests", "data"))
    args = parser.parse_args()

    env = make_env()
    template_dir = os.path.join(args.fixtures, "chat-templates")
    cases = []
    sources = []
    for name in sorted(os.listdir(template_dir)):
        if name.endswith(".jinja"):
            with open(os.path.join(template_dir, name), encoding="utf-8") as f:
                sources.append((name, f.read(), False))
    sources += [(name, source, True) for name, source in EXTRA_TEMPLATES.items()]
    for name, source, embedded in sources:
        for conv in CONVERSATIONS:
            for agp in (True, False):
                context = {"messages": conv["messages"], "tools": conv.get("tools"),
                           "add_generation_prompt": agp, "bos_token": BOS, "eos_token": EOS}
                context.update(conv.get("extra", {}))
                result = render(env, source, context)
                cases.append({"template": name, "conversation": conv["name"],
                              "add_generation_prompt": agp, **result})
    golden_extra = dict(EXTRA_TEMPLATES)
    golden = {"jinja2_version": jinja2.__version__, "now": NOW, "bos_token": BOS,
              "eos_token": EOS, "conversations": CONVERSATIONS,
              "embedded_templates": golden_extra, "cases": cases}
    with open(os.path.join(args.out_dir, "chat_template_golden.json"), "w",
              encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")

    lang = []
    for source, context in LANGUAGE_CASES:
        lang.append({"template": source, "context": context, **render(env, source, context)})
    with open(os.path.join(args.out_dir, "jinja_language_golden.json"), "w",
              encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "now": NOW, "cases": lang}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} chat template cases, {len(lang)} language cases", file=sys.stderr)


if __name__ == "__main__":
    main()
