"""Inputs for render_chat_templates.py: conversations and one-construct templates."""

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "filters": {"type": "array", "items": {"type": "string"}},
            "score": {"type": ["number", "null"]}},
            "required": ["query"]}}},
]

CALL = {"id": "call12345", "type": "function", "function": {
    "name": "get_weather",
    "arguments": {"city": "Paris", "unit": "celsius", "days": 3, "ratio": 0.5,
                  "flags": [True, False, None], "nested": {"b": 1, "a": "ü"}}}}
CALL2 = {"id": "call67890", "type": "function", "function": {
    "name": "search", "arguments": {"query": "pagoda \"inference\"", "score": 1.0}}}
CALL_STR = {"id": "call12345", "type": "function", "function": {
    "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

CONVERSATIONS = [
    {"name": "user_only", "messages": [{"role": "user", "content": "Hello!"}]},
    {"name": "system_user", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"}]},
    {"name": "multi_turn", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}]},
    {"name": "system_multi_turn_assistant_last", "messages": [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Germany?"},
        {"role": "assistant", "content": "Berlin."}]},
    {"name": "unicode_whitespace", "messages": [
        {"role": "system", "content": "Réponds en français. 日本語も OK 🙂"},
        {"role": "user", "content": "\n  Ça va? \"quotes\" 'single' \\back\\slash\t\n"},
        {"role": "assistant", "content": "Très bien — merci! 👍\n\n"},
        {"role": "user", "content": "<b>html</b> & {{ not a template }} {% raw %}"}]},
    {"name": "empty_content", "messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": " "}]},
    {"name": "tools_no_call", "tools": TOOLS, "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"}]},
    {"name": "tools_simple_types", "tools": [TOOLS[0], {"type": "function", "function": {
        "name": "lookup", "description": "Look things up.", "parameters": {
            "type": "object", "properties": {"keys": {"type": "array", "items": {"type": "string"}},
                                             "opts": {"type": "object", "additionalProperties": {"type": "boolean"}},
                                             "any": {}}}}}],
     "messages": [{"role": "system", "content": "Tools!"}, {"role": "user", "content": "Look up x"},
                  {"role": "assistant", "content": None, "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call12345", "content": "42"}]},
    {"name": "tools_no_system", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"}]},
    {"name": "tool_call_round_trip", "tools": TOOLS, "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
         "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5°C and clear."},
        {"role": "user", "content": "Thanks"}]},
    {"name": "tool_call_pending_result", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny"}]},
    {"name": "parallel_tool_calls", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather and news?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, CALL2]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call67890", "content": "no news"}]},
    {"name": "string_arguments", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL_STR]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny"}]},
    {"name": "reasoning_content", "messages": [
        {"role": "user", "content": "Think first."},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nThe answer is 4."},
        {"role": "user", "content": "Again?"}]},
    {"name": "roles_not_alternating", "messages": [
        {"role": "user", "content": "one"}, {"role": "user", "content": "two"}]},
    {"name": "system_only", "messages": [{"role": "system", "content": "Only a system prompt."}]},
    {"name": "extra_kwargs", "extra": {"date_string": "01 Jan 2025", "tools_in_user_message": False},
     "tools": TOOLS, "messages": [
        {"role": "user", "content": "Hi"}]},
    {"name": "long_conversation", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "word " * (i % 7)}
        for i in range(15)]},
]

LANGUAGE_CASES = [
    # output and literals
    ("{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 1.0 }}{{ 1.5e3 }}{{ 1e-7 }}{{ 123456789.125 }}{{ true }}{{ none }}", {}),
    ("{{ [1, 'a', \"it's\", none, true, 2.50] }} {{ {'k': 'v', 'n': [1, 2]} }} {{ (1, 2) }} {{ (1,) }} {{ () }}", {}),
    ("{{ 'tab\\there' }}|{{ 'nl\\nx' }}|{{ '\\u00e9\\x41\\\\' }}|{{ 'a' 'b' }}", {}),
    ("{{ x }}|{{ x.y is defined }}|{{ d.missing }}|{{ d['missing'] }}", {"d": {"a": 1}}),
    ("{{ 1_000 + 0x10 + 0o7 + 0b11 }}", {}),
    # arithmetic
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -3 + +2 }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 0.1 + 0.2 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ x ~ [1] }}", {}),
    ("{{ '%s and %d and %5.2f and %r %%' % ('s', 42, 3.14159, 'q') }} {{ 'hi %s' % 'you' }}", {}),
    # comparisons and logic
    ("{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 2 >= 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ true == 1 }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not 'x' in 'y' }} {{ 'a' in x }}", {}),
    ("{{ 0 or 'default' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }} {{ not none }} {{ not [] and 1 }}", {}),
    ("{{ 'yes' if x else 'no' }} {{ 'yes' if 1 }} [{{ 'a' if false }}] {{ 1 if false else 2 if false else 3 }}", {}),
    # attributes, items, slicing
    ("{{ m.role }} {{ m['content'] }} {{ m.get('role') }} {{ m.get('x', 'dflt') }} {{ m.get('x') }} {{ l[0] }} {{ l[-1] }} {{ l[9] }} {{ l.0 }}", {"m": {"role": "user", "content": "hi"}, "l": [1, 2, 3]}),
    ("{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[::2] }} {{ l[1:3] }} {{ l[::-1] }} {{ l[-2:] }} {{ s[10:] }}|{{ u[::-1] }} {{ u[1] }} {{ u|length }}", {"s": "abcdef", "l": [1, 2, 3, 4], "u": "héllo😀"}),
    ("{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"z": 1, "a": [2], "m": None}}),
    ("{{ d['items'] }}", {"d": {"items": 3}}),
    # string methods
    ("{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}", {}),
    ("{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abcb'.count('b') }} {{ '-'.join(['a', 'b']) }} {{ '{} + {} = {x}'.format(1, 2, x=3) }} {{ '12'.isdigit() }} {{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    ("{{ '\\u00a0 nbsp \\u3000'.strip() }}|{{ ' x '|trim }}|{{ 'xax'|trim('x') }}", {}),
    # filters
    ("{{ 'abc' | upper }} {{ 'ABC' | lower }} {{ 'hello-world foo(bar' | title }} {{ 'hELLO' | capitalize }} {{ [3, 1, 2] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }}", {}),
    ("{{ x | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | default('d') }} {{ 0 | d('z', boolean=true) }}", {}),
    ("{{ [1, 2, 3] | join(', ') }} {{ ['a', none, 1] | join }} {{ users | join(', ', attribute='name') }} {{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ users | sort(attribute='age') | map(attribute='name') | list }}", {"users": [{"name": "bo", "age": 30}, {"name": "al", "age": 25}]}),
    ("{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ [1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ 'abc' | list }} {{ [1, 2, 3] | sum }} {{ [1.5, 2] | sum }} {{ [3, 1] | min }} {{ [3, 1] | max }} {{ [1, 2, 1, 3] | unique | list }}", {}),
    ("{{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }} {{ msgs | selectattr('tool') | list }} {{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ [1, 0, '', 'a'] | select | list }} {{ ['a', 'B'] | map('upper') | list }} {{ [1, 2] | map('string') | join }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool": True}, {"role": "user", "content": "c"}]}),
    ("{{ d | items | list }} {{ d | dictsort }} {{ d | dictsort(by='value', reverse=true) }}", {"d": {"b": 2, "a": 3, "C": 1}}),
    ("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'abc' | center(9) }}|{{ 'one two  three' | wordcount }}", {}),
    ("{{ '3' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 2 | float }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(method='ceil') }} {{ -3 | abs }} {{ 5 | round }}", {}),
    ("{{ 1 | string ~ 2 }} {{ [1] | string }} {{ none | string }} {{ '%s-%s' | format('a', 1) }} {{ 'x' | replace('x', 'y') }} {{ 'aXbX' | replace('X', '') }} {{ '<a href=\"x\">' | e }} {{ 'long sentence here' | truncate(9) }} {{ 'abcdefghijklmnop' | truncate(5, true, '..', 0) }}", {}),
    ("{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3, 4, 5] | batch(2, 0) | list }} {{ [1, 2, 3, 4, 5] | slice(2) | list }} {% for g in people | groupby('city') %}{{ g.grouper }}:{{ g.list | map(attribute='n') | join(',') }};{% endfor %} {{ o | attr('x') }}", {"people": [{"n": "a", "city": "X"}, {"n": "b", "city": "W"}, {"n": "c", "city": "X"}], "o": {"x": 1}}),
    # tojson
    ("{{ d | tojson }}", {"d": {"b": 1, "a": [1.0, 2, "é\n\u0001\"\\"], "c": None, "t": True, "e": {}, "f": []}}),
    ("{{ d | tojson(indent=2) }}|{{ d | tojson(indent=0) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}|{{ d | tojson(ensure_ascii=true) }}|{{ d | tojson(indent='\\t') }}", {"d": {"z": [1, {"y": "ü😀"}], "a": 1.5e300, "m": -0.0}}),
    ("{{ 'x' | tojson }} {{ 1.0 | tojson }} {{ none | tojson }} {{ [] | tojson(indent=4) }} {{ (1, 2) | tojson }}", {}),
    # tests
    ("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ x is iterable }} {{ [] is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 1 is eq 1 }} {{ 2 is gt(1) }} {{ 'a' is in ['a'] }} {{ 'abc' is lower }} {{ x is undefined }} {{ none is sameas none }} {{ range is callable }} {{ 1 is not none }} {{ x is not defined }}", {}),
    ("{{ 'ns' if ns is mapping else 'no' }}{% set ns = namespace() %} {{ ns is mapping }}", {}),
    # control flow
    ("{% if x %}a{% elif y %}b{% else %}c{% endif %}{% if not x %}d{% endif %}", {"y": 1}),
    ("{% for i in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('odd', 'even') }}/{{ loop.depth }};{% endfor %}", {"items": ["a", "b", "c"]}),
    ("{% for i in [] %}x{% else %}empty{% endfor %}{% for i in x %}y{% else %}undef{% endfor %}{% for c in 'héé' %}[{{ c }}]{% endfor %}{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}|{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", {}),
    ("{% for i in range(6) if i is odd %}{{ i }}{{ loop.index }}{{ loop.length }}{% if loop.last %}!{% endif %} {% endfor %}", {}),
    ("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}{% for a, b in [[5, 6]] %}{{ a * b }}{% endfor %}", {}),
    ("{% for row in rows %}{% for c in row %}{{ loop.index }}{{ c }}{% endfor %}|{{ loop.index }}{% endfor %}", {"rows": [["a", "b"], ["c"]]}),
    ("{% for item in tree recursive %}<{{ item.name }}{% if item.children %}{{ loop(item.children) }}{% endif %}:{{ loop.depth }}>{% endfor %}", {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}, {"name": "d"}]}),
    # scoping and set
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% for i in [1, 2] %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}[{{ y }}]", {}),
    ("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("{% set ns = namespace(count=0, items='') %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% set ns.items = ns.items ~ i %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set c = [3, 4] %}{% set d, e = c %}{{ d + e }}", {}),
    ("{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("{% set messages = messages[1:] %}{{ messages | length }}", {"messages": [1, 2, 3]}),
    # macros and call blocks
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', greeting='Yo') }}", {}),
    ("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k=4) }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(10) }}", {}),
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    # whitespace control
    ("a\n  {% if true %}\n  x\n  {% endif %}\n  b\n", {}),
    ("a  {{- 'x' -}}  b {# c #}\n d {%+ if true %} e {% endif +%}\nf", {}),
    ("{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\n", {}),
    ("<{%- if true -%}\n  x  \n{%- endif -%}>\n  {#- comment -#}  \n<{{ 'y' }}>  {# keep #}  z", {}),
    ("line1\n    {% set x = 1 %}\nline2 {% set y = 2 %}\nline3\n\t{# c #}\nline4", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw -%}|", {}),
    ("a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n", {}),
    ("{{ 'x' }}\n\n", {}),
    ("  {{ 'x' }}  \n  {% if true %}y{% endif %}  \n", {}),
    # errors (runtime)
    ("{{ x + 1 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ x.y.z }}", {}),
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("{{ l.append(1) }}", {"l": []}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{% for a, b in [1] %}{% endfor %}", {}),
    ("{% set x = 1 %}{% set x.y = 2 %}", {}),
    # errors (syntax)
    ("{% if x %}never closed", {}),
    ("{% for x in y %}{% endif %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{{ x | nosuchfilter }}", {}),
    ("{{ x is nosuchtest }}", {}),
    ("{{ 1 + }}", {}),
    ("line1\nline2 {{ (1 + 2 }}", {}),
    ("{% endfor %}", {}),
    ("{% break %}", {}),
    ("{% include 'x.html' %}", {}),
    ("{# never closed", {}),
    ("{% frobnicate %}", {}),
    # strftime_now
    ("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}", {}),
]

# Well-known chat templates beyond the fixtures (written from their published
# forms, some trimmed), rendered on CONVERSATIONS as well; the golden file
# embeds their source.
EXTRA_TEMPLATES = {
    "llama-2.jinja": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    "chatml.jinja": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "mistral-7b-v0.1.jinja": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    "zephyr.jinja": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
    "gemma-3-style.jinja": "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n",
    "hermes-tool-use.jinja": """{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {
    "string": "str",
    "number": "float",
    "integer": "int",
    "boolean": "bool"
} %}

{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec.items) + "]"}}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']'}}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable %}
    {{- "Union[" }}
    {%- for t in json_spec.type %}
      {{- json_to_python_type({"type": t}) }}
      {%- if not loop.last %}
        {{- "," }}
    {%- endif %}
    {%- endfor %}
    {{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}


{{- bos_token }}
{{- '<|im_start|>system\n' }}
{{- "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. " }}
{{- "<tools>\n" }}
{%- for tool in tools or [] %}
    {%- if tool.function is defined %}
        {%- set tool = tool.function %}
    {%- endif %}
    {{- '{"type": "function", "function": ' }}
    {{- '{"name": "' + tool.name + '", ' }}
    {{- '"description": "' + tool.name + '(' }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {{- param_name + ": " + json_to_python_type(param_fields) }}
        {%- if not loop.last %}
            {{- ", " }}
        {%- endif %}
    {%- endfor %}
    {{- ")" }}
    {%- if tool.return is defined %}
        {{- " -> " + json_to_python_type(tool.return) }}
    {%- endif %}
    {{- " - " + tool.description + "\n\n" }}
    {%- for param_name, param_fields in tool.parameters.properties|items %}
        {%- if loop.first %}
            {{- "    Args:\n" }}
        {%- endif %}
        {{- "        " + param_name + "(" + json_to_python_type(param_fields) + "): " + param_fields.description|default('')|trim }}
    {%- endfor %}
    {{- '", "parameters": ' }}
    {{- tool.parameters|tojson }}
    {{- "}\n" }}
{%- endfor %}
{{- " </tools>" }}
{{- "<|im_end|>\n" }}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" or (message.role == "assistant" and message.tool_calls is not defined) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n' }}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '{' }}
            {{- '"name": "' }}
            {{- tool_call.name }}
            {{- '"' }}
            {{- ', '}}
            {%- if tool_call.arguments is defined %}
                {{- '"arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments|tojson }}
                {%- endif %}
            {%- endif %}
            {{- '}' }}
            {{- '\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>tool\n' }}
        {%- endif %}
        {{- '<tool_response>\n' }}
        {{- message.content }}
        {%- if not loop.last %}
            {{- '\n</tool_response>\n' }}
        {%- else %}
            {{- '\n</tool_response>' }}
        {%- endif %}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>' }}
        {%- elif loop.last %}
            {{- '<|im_end|>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
""",
    "qwen3-style.jinja": """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
""",
    "phi-3-small-style.jinja": "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    "deepseek-v2-style.jinja": "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
}
