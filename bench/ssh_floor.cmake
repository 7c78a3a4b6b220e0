# bench/ssh_floor: the bare libssh floor for multi-host launch (issue 4). Included from
# bench/CMakeLists.txt; run by bench/ssh_floor.sh. Not a test.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBSSH REQUIRED IMPORTED_TARGET libssh)
find_package(Threads REQUIRED)
add_executable(mlrun_bench_ssh_floor ${CMAKE_CURRENT_LIST_DIR}/ssh_floor.cc)
target_compile_features(mlrun_bench_ssh_floor PRIVATE cxx_std_20)
target_link_libraries(mlrun_bench_ssh_floor PRIVATE PkgConfig::LIBSSH Threads::Threads)
set_target_properties(mlrun_bench_ssh_floor PROPERTIES OUTPUT_NAME ssh_floor
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
