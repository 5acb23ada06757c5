#!/usr/bin/env bash
# install-deps.sh: installs the system packages memsnap's build and tests need, on Debian or
# Ubuntu, naming each one it installs; does nothing for what is already there.
#   build:  gcc g++ make pkg-config libunwind-dev libsqlite3-dev libcjson-dev zlib1g-dev
#   fuzz:   clang and its runtime libraries (libFuzzer, sanitizers)
#   tests:  python3 and its pip (test_install), python3-nbclient and python3-ipykernel (memsnap.show()
#           in a real Jupyter kernel: tests/recorder/test_notebook.py), binutils (addr2line names the file and line of native frames), nodejs and
#           npm (unless a node is already on the PATH), chromium (the report page's browser
#           tests), and from npm playwright-core into tests/web/node_modules (tests/web/package.json)
# The CUDA toolkit (headers in $CUDA_HOME/include, default /usr/local/cuda) is not a Debian
# package of the same version everywhere: it is checked, and its absence explained.
set -eu
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for pkg in gcc g++ make pkg-config libunwind-dev libsqlite3-dev libcjson-dev zlib1g-dev python3 binutils \
  python3-nbclient python3-ipykernel; do
  have_pkg "$pkg" || need+=("$pkg")
done
have_pkg chromium || [ -n "${CHROMIUM:-}" ] || need+=(chromium) # the page's browser tests
have_pkg clang || need+=(clang)                                  # make fuzz: libFuzzer
have_pkg libclang-rt-14-dev || ! apt-cache show libclang-rt-14-dev >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)  # test_install: pip install --target
command -v node >/dev/null || need+=(nodejs)                     # the viewer's tests run on node
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "error: missing packages (${need[*]}) and no apt-get to install them" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "install-deps: all system packages present"
fi
make --no-print-directory -C "$(dirname "$0")/.." test-web-deps # playwright-core, as `make test` installs it
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda.h" ]; then
  echo "error: CUDA toolkit headers not found in $cuda/include; install the CUDA toolkit (NVIDIA's" >&2
  echo "       packages, or Debian's nvidia-cuda-toolkit) or set CUDA_HOME" >&2
  exit 1
fi
