#!/usr/bin/env bash
# The test suite under ThreadSanitizer: clang, the CPU backend, libomp with its Archer tool (it
# tells TSan about OpenMP's barriers). Every process's reports go to one folder; any report fails
# the run, whatever the test made of the process's exit status. Needs clang, libclang-rt-dev and libomp-dev.
# Extra arguments go to ctest (-R test_server_api: one test).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build-tsan}
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -1)
[ -n "$archer" ] || { echo "tsan.sh: no libarcher.so (Debian: libomp-dev)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBURST_TSAN=ON -DBURST_CUDA=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)"
logs=$(mktemp -d)
export OMP_TOOL_LIBRARIES=$archer TSAN_OPTIONS="log_path=$logs/tsan suppressions=$PWD/tests/tsan.supp second_deadlock_stack=1"
status=0
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 1500 "$@" || status=$?
if compgen -G "$logs/tsan.*" >/dev/null; then
    cat "$logs"/tsan.*
    echo "tsan.sh: ThreadSanitizer reported $(cat "$logs"/tsan.* | grep -c '^WARNING') problem(s) in $(ls "$logs" | wc -l) process(es)" >&2
    status=1
fi
rm -rf "$logs"
exit $status
