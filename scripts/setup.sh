#!/usr/bin/env bash
# Set up everything archsim needs on a fresh Debian machine with Python 3.11:
#   scripts/setup.sh           create .venv, install the CPU build of torch first, then archsim
#                              with its dev extra (every optional feature + the test tools,
#                              so that make test / make demo are complete; idempotent)
#   scripts/setup.sh --system  also install system tools the tests need (Icarus Verilog,
#                              Verilator, g++, make) via apt-get when missing and running as
#                              root; otherwise say exactly what to install and fail.
# Environment: PYTHON (interpreter, default python3.11 or python3), VENV (default .venv).
# torch: a bare 'torch' requirement pulls a multi-GB CUDA build from PyPI, so the pinned CPU
# build is installed first ('torch==2.13.0+cpu', from a local wheel or PyTorch's CPU wheel
# index given in PIP_EXTRA_INDEX_URL); if that is unavailable the plain release is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
TORCH_VERSION=2.13.0
want_system=0
[ "${1:-}" = "--system" ] && want_system=1

is_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
  # apt_install PKG...: install Debian packages (root only); apt-get update once per run.
  if [ -z "${_APT_UPDATED:-}" ]; then apt-get update -qq; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# --- Python interpreter and venv support ------------------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: archsim needs Python >= 3.11; '$PY' is $("$PY" --version 2>&1 || echo missing)." >&2
  echo "setup: on Debian: apt-get install python3.11 python3.11-venv" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ] && ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
  if is_root && command -v apt-get >/dev/null; then
    echo "setup: installing python3-venv (Debian's Python has no ensurepip without it)"
    apt_install python3-venv
  else
    echo "setup: '$PY -m venv' needs Debian's python3-venv: run 'sudo apt-get install python3-venv'" >&2
    exit 1
  fi
fi

# --- virtual environment -------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$TORCH_VERSION'))" 2>/dev/null; then
  echo "setup: installing torch $TORCH_VERSION (CPU build)"
  if ! "${PIP[@]}" "torch==$TORCH_VERSION+cpu" 2>/dev/null; then
    echo "setup: no CPU wheel of torch $TORCH_VERSION found; installing torch==$TORCH_VERSION"
    echo "setup: (set PIP_EXTRA_INDEX_URL to PyTorch's CPU wheel index to avoid the CUDA build)"
    "${PIP[@]}" "torch==$TORCH_VERSION"
  fi
fi
stamp="$VENV/.archsim-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing archsim and its pinned dependencies into $VENV"
  "${PIP[@]}" -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  "$VENV/bin/python" -c "import archsim, isa, mapping, workloads" 
  touch "$stamp"
fi

# --- system tools ----------------------------------------------------------------------------
# The RTL co-simulation runs on Icarus Verilog (always) and Verilator (its smoke test and, with
# ARCHSIM_COSIM_SIMULATORS=icarus,verilator, every bench); Verilator builds need g++ and make.
if [ "$want_system" = 1 ]; then
  missing=()
  command -v iverilog >/dev/null 2>&1 || missing+=(iverilog)
  command -v verilator >/dev/null 2>&1 || missing+=(verilator)
  command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v make >/dev/null 2>&1 || missing+=(make)
  if [ "${#missing[@]}" -gt 0 ]; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
      echo "setup: installing ${missing[*]} (apt-get install ${missing[*]})"
      apt_install "${missing[@]}"
    else
      echo "setup: the RTL co-simulation tests need Icarus Verilog 11+, Verilator 5.006+, g++ and make." >&2
      echo "setup: install them with: sudo apt-get install ${missing[*]}   (then re-run make test)" >&2
      exit 1
    fi
  fi
fi
exit 0
