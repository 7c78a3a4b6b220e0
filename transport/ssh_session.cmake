# SSH to the job's hosts (transport/ssh_session.h): libssh through pkg-config. Included from
# transport/CMakeLists.txt; the unit tests in ssh_session_test.cc need no remote host.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBSSH REQUIRED IMPORTED_TARGET libssh)
find_package(fmt REQUIRED)

add_library(mlrun_ssh STATIC ${CMAKE_CURRENT_LIST_DIR}/ssh_session.cc
  ${CMAKE_CURRENT_LIST_DIR}/ssh_channel.cc)
target_include_directories(mlrun_ssh PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(mlrun_ssh PUBLIC Threads::Threads PRIVATE PkgConfig::LIBSSH fmt::fmt mlrun_worker)

if(TARGET mlrun_unit_tests)
  target_sources(mlrun_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ssh_session_test.cc)
  target_link_libraries(mlrun_unit_tests PRIVATE mlrun_ssh)
endif()
