# Run at every build (cmake -P): writes OUT, a header naming burst's version, the git commit of SRC
# (with -dirty for uncommitted changes; outside a git checkout GIVEN_COMMIT, else "unknown") and
# BUILT_WITH. OUT is rewritten only when that changes, so that a build without changes recompiles
# nothing.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=7 OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(rc OR NOT commit)
  set(commit "${GIVEN_COMMIT}")
endif()
if(NOT commit)
  set(commit unknown)
endif()
file(WRITE "${OUT}.new" "#define BURST_VERSION \"${VERSION}\"\n#define BURST_COMMIT \"${commit}\"\n"
                        "#define BURST_BUILT_WITH \"${BUILT_WITH}\"\n")
execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${OUT}.new" "${OUT}")
file(REMOVE "${OUT}.new")
