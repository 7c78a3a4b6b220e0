# SSH to the job's hosts (transport/ssh_session.h): libssh through pkg-config. Included from
# transport/CMakeLists.txt; the unit tests in ssh_session_test.cc need no remote host.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBSSH REQUIRED IMPORTED_TARGET libssh)
find_package(fmt REQUIRED)

# libssh is not linked: transport/libssh_lazy.cc opens it with dlopen on first use, so that
# processes that never use SSH do not load it and its libraries at start (issue 11).
add_library(mlrun_ssh STATIC ${CMAKE_CURRENT_LIST_DIR}/ssh_session.cc
  ${CMAKE_CURRENT_LIST_DIR}/ssh_channel.cc ${CMAKE_CURRENT_LIST_DIR}/libssh_lazy.cc)
target_include_directories(mlrun_ssh PUBLIC ${PROJECT_SOURCE_DIR})
target_include_directories(mlrun_ssh PRIVATE ${LIBSSH_INCLUDE_DIRS})
target_compile_options(mlrun_ssh PRIVATE ${LIBSSH_CFLAGS_OTHER})
target_link_libraries(mlrun_ssh PUBLIC Threads::Threads ${CMAKE_DL_LIBS} PRIVATE mlrun_fmt mlrun_worker)

if(TARGET mlrun_unit_tests)
  target_sources(mlrun_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ssh_session_test.cc)
  target_link_libraries(mlrun_unit_tests PRIVATE mlrun_ssh)
endif()
