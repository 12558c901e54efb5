# Run at build time (not configure time), so results name the revision actually built.
# Writes OUT only when the revision changed, so an unchanged tree does not rebuild.
execute_process(COMMAND git describe --always --dirty --abbrev=12 WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR NOT revision)
  set(revision "unknown")
endif()
set(content "#pragma once\n#define ATTN_GIT_REVISION \"${revision}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" previous)
endif()
if(NOT previous STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
