# Sourced by the bench/gpu_*.sh scripts, from the project root, on the GPU machine: configures and
# builds build-gpu (CUDA, sm_90a, Release) and sets $out (logs: $OUT or /tmp) and $models (the
# models directory: BURST_MODELS_DIR, else .gpu-kit/models, else ../shared/models). With a
# .gpu-kit/ beside the checkout (../shared/gpu-kit/README.md) it first sources its prelude, which
# unpacks burst's Debian libraries, and points CMake at the NCCL of the machine's Python.
# Returns 1, with the errors printed, when the build fails.
out=${OUT:-/tmp}
models=${BURST_MODELS_DIR:-$PWD/../shared/models}
[ -z "$BURST_MODELS_DIR" ] && [ -d .gpu-kit/models ] && models=$PWD/.gpu-kit/models
if [ -f .gpu-kit/prelude.sh ]; then
  source .gpu-kit/prelude.sh # sets $nv: the Python environment's nvidia/ directory, if any
  pc=/tmp/devroot/usr/lib/x86_64-linux-gnu/pkgconfig
  export PKG_CONFIG_PATH=$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  # The .pc files say prefix=/usr; the sysroot maps their -I/-L paths into the unpacked tree.
  export PKG_CONFIG_SYSROOT_DIR=/tmp/devroot
  # libmicrohttpd.pc names gnutls under Requires.private (for static links only), and pkg-config
  # refuses the module when gnutls.pc is missing (no libgnutls28-dev): an empty stand-in answers
  # it; the shared libmicrohttpd loads the machine's libgnutls at run time.
  command -v pkg-config >/dev/null && ! pkg-config --exists gnutls &&
    printf 'Name: gnutls\nDescription: stand-in for libmicrohttpd.pc\nVersion: 3.7.5\n' >"$pc/gnutls.pc"
  [ -n "$nv" ] && [ -d "$nv/nccl" ] && export NCCL_ROOT=${NCCL_ROOT:-$nv/nccl}
fi
if ! command -v pkg-config >/dev/null; then
  echo "pkg-config not found: CMake finds cJSON, SentencePiece and libmicrohttpd with it"
  return 1
fi
cmake -S . -B build-gpu -DBURST_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
  -DBURST_MODELS_DIR="$models" >"$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; return 1; }
grep -E "burst: (NCCL|cuDNN)" "$out/cmake.log"
cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -20; return 1; }
grep -E "warning" "$out/build.log" | head -5
return 0
