#!/usr/bin/env bash
# End-to-end tests of `pagoda serve` (tests/e2e) with the official openai client,
# installed from PyPI into a virtual environment (.venv-e2e, git-ignored).
#
#   scripts/e2e.sh [PATH/TO/pagoda] [pytest args...]
#
# PATH/TO/pagoda defaults to build/pagoda; fixtures come from $PAGODA_FIXTURES or
# <repo>/../shared/fixtures. Servers listen on 127.0.0.1 only (ports picked by the OS).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BINARY="${1:-$ROOT/build/pagoda}"
[ $# -gt 0 ] && shift
VENV="${PAGODA_E2E_VENV:-$ROOT/.venv-e2e}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# lm-eval drives the server as lm-evaluation-harness users do (local-completions, a
# local task file, no network at test time: HF_*_OFFLINE in the test).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  openai==1.55.3 httpx==0.27.2 pytest==8.3.3 pytest-timeout==2.3.1 "lm-eval[api]==0.4.13"
export PAGODA_BINARY="$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")"
cd "$ROOT/tests/e2e"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider --timeout 600 "$@" .
