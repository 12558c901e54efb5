# The installed package (`cmake --install BUILD --prefix P`, then find_package(attnbench) in another
# project; examples/consumer): the problem model (attnbench::core), the reference
# (attnbench::reference) and the judge (attnbench::judge, with the naive yardstick it runs,
# attnbench::cpu_naive), as static libraries with their headers under include/attnbench. All of
# it is CPU code: nothing here links CUDA, whatever ATTN_CUDA built (tests/package_consumer.sh
# checks the consumer's NEEDED entries). Also the attnbench command, its plugin worker and the
# plugin ABI header.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(attn_core PROPERTIES EXPORT_NAME core)
set_target_properties(attn_reference PROPERTIES EXPORT_NAME reference)
# attn_warnings reaches the static libraries' link interface (as LINK_ONLY): its compile options
# never reach a consumer, its link options do, which is what a sanitizer build's libraries need.
set_target_properties(attn_warnings PROPERTIES EXPORT_NAME build_flags)

set(attn_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/attnbench)
install(TARGETS attn_core attn_reference attn_judge attn_cpu_naive attn_warnings
        EXPORT attnbenchTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnbench)
install(DIRECTORY core/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnbench/core FILES_MATCHING PATTERN "*.hpp")
install(FILES reference/reference.hpp reference/reference_backward.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnbench/reference)
install(FILES judge/judge.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnbench/judge)
install(EXPORT attnbenchTargets NAMESPACE attnbench:: DESTINATION ${attn_package_dir})
# The command and its plugin worker side by side (validate looks for the worker beside itself),
# keeping the paths of the shared libraries they were linked with; the plugin ABI's header, for a
# kernel's own build (cc -I PREFIX/include/attnbench).
set_target_properties(attnbench attnbench-plugin-host PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS attnbench attnbench-plugin-host RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES impls/plugin/attnbench_plugin.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnbench)

configure_package_config_file(cmake/attnbenchConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/attnbenchConfig.cmake
                              INSTALL_DESTINATION ${attn_package_dir})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/attnbenchConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/attnbenchConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/attnbenchConfigVersion.cmake
        DESTINATION ${attn_package_dir})
