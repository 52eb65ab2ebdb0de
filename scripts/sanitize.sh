#!/usr/bin/env bash
# CI's sanitizer jobs: ASan+UBSan over the library, a fast test subset and the mpi tests, TSan over
# the concurrency tests.
#
#   bash scripts/sanitize.sh [asan|tsan|all]      (default: all)
#
# Each job builds the library, the CLI and a subset of the tests (RCJIT_TEST_SOURCES_REGEX)
# with -fsanitize (RCJIT_SANITIZE) at -O1 with asserts on, in a unity build, into
# build-asan/ or build-tsan/ (ccache makes a rebuild cheap), then runs them with CTest. The
# first report ends the test process, so any report fails the job. Suppressions, for reports
# inside uninstrumented third-party code only, live in scripts/sanitizers/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${JOBS:-$(nproc)}"
supp="$root/scripts/sanitizers"

# The ASan+UBSan subset: parsers and readers of untrusted input (graph text, safetensors,
# cache entries and artifact blobs, the CLI), tensor sizes, the eager kernels, compile and
# the loop code generator (including their concurrency tests), symbolic shapes and passes,
# whole training steps (traced mutations, storage adopted on write-back), checkpoints
# (files read and state restored in place), autocast, the profiler and bf16 products
# written in f32 (library_cast: the blocked steps' offsets). Then
# the mpi tests (rcjit_mpi_tests: collectives, ddp, ZeRO, compiled collectives) as a world of
# one and under `mpirun -np 2` (asan_mpi).
asan_tests='^(size_overflow|graph_io|safetensors|cache|cli|tensor|tracer|eager_elementwise|eager_reduce|eager_matmul|eager_nn|compile|compile_graph|codegen|dynamic|passes|events|logs|whole_step|checkpoint|autocast|profile|library_cast)_test\.cpp$'
# The TSan subset: the test files holding the tests that start threads; only those run.
tsan_tests='^(autograd|eager_matmul|codegen|compile|work_pool|tiered)_test\.cpp$'
tsan_filter='^(Autograd\.GradModeIsPerThread|EagerMatmul\.ConcurrentCallsAgree|CodegenTest\.ConcurrentCompilesAndCalls|Compile\.ConcurrentCalls|WorkPool\..*|Tiered\.(ConcurrentCallersDuringTheSwitch|ProcessExitsDuringABackgroundCompile))$'

build() { # build dir, sanitizers, test-source regex
  cmake -S "$root" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_UNITY_BUILD=ON \
    -DRCJIT_SANITIZE="$2" -DRCJIT_TEST_SOURCES_REGEX="$3" \
    -DRCJIT_BUILD_BENCH=OFF -DRCJIT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$1" -j "$jobs" --target rcjit_tests rcjit-cli
}

asan() {
  local dir="$root/build-asan"
  build "$dir" address,undefined "$asan_tests"
  # allocator_may_return_null: an allocation larger than ASan supports returns null, as
  # aligned_alloc does without ASan, so the tests of impossible sizes see their rcjit::Error.
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1" \
  LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp" \
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" -LE 'gpu|mpi|multihost'
}

# The mpi tests under ASan+UBSan+LSan. Open MPI unloads its components at MPI_Finalize, after
# which LSan cannot name their frames, and its frames have no frame pointers: so components
# stay loaded (mca_base_component_disable_dlclose) and LSan unwinds fully (slower), so that
# lsan_mpi.supp can name Open MPI's libraries.
asan_mpi() {
  local dir="$root/build-asan"
  cmake --build "$dir" -j "$jobs" --target rcjit_mpi_tests
  local env=(OMPI_MCA_mca_base_component_disable_dlclose=1
    "ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:fast_unwind_on_malloc=0"
    "LSAN_OPTIONS=suppressions=$supp/lsan_mpi.supp:print_suppressions=0"
    "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp")
  local flags=()
  for e in "${env[@]}"; do flags+=(-x "$e"); done
  [[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  echo "asan: mpi tests, a world of 1" >&2
  env "${env[@]}" "$dir/tests/rcjit_mpi_tests"
  echo "asan: mpi tests, mpirun -np 2" >&2
  mpirun --oversubscribe -np 2 "${flags[@]}" "$dir/tests/rcjit_mpi_tests"
}

tsan() {
  local dir="$root/build-tsan"
  build "$dir" thread "$tsan_tests"
  # libgomp (OpenMP, also under oneDNN) is not TSan-instrumented: its thread pool's
  # synchronization is invisible to TSan, so OpenMP runs on one thread here.
  OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp" \
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" -R "$tsan_filter"
}

case "${1:-all}" in
asan) asan && asan_mpi ;;
tsan) tsan ;;
all) asan && asan_mpi && tsan ;;
*) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
