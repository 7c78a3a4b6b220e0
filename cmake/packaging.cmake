# Installation of the rendezvous client library as a package (docs/packaging.md):
#   include/mlrun/*.hpp                       the public headers
#   lib/libmlrun_rendezvous{,_gloo}.a         the libraries (static, position-independent)
#   lib/cmake/mlrun/                          find_package(mlrun CONFIG) -> mlrun::rendezvous,
#                                             mlrun::rendezvous_gloo (where Gloo was found)
#   lib/pkgconfig/mlrun-rendezvous{,-gloo}.pc pkg-config
# Included from rendezvous/CMakeLists.txt, after its targets exist. Two export sets, so that the
# package loads without Gloo and offers mlrun::rendezvous_gloo only where Gloo is installed.
include(CMakePackageConfigHelpers)

set(MLRUN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlrun)
set(_mlrun_headers
    ${PROJECT_SOURCE_DIR}/rendezvous/include/mlrun/rendezvous.hpp
    ${PROJECT_SOURCE_DIR}/rendezvous/include/mlrun/rendezvous_export.hpp)

install(TARGETS mlrun_rendezvous EXPORT mlrunTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT mlrunTargets NAMESPACE mlrun:: DESTINATION ${MLRUN_INSTALL_CMAKEDIR})

set(MLRUN_HAS_GLOO OFF)
if(TARGET mlrun_rendezvous_gloo)
  set(MLRUN_HAS_GLOO ON)
  list(APPEND _mlrun_headers ${PROJECT_SOURCE_DIR}/rendezvous/include/mlrun/gloo_store.hpp)
  install(TARGETS mlrun_rendezvous_gloo EXPORT mlrunGlooTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT mlrunGlooTargets NAMESPACE mlrun:: DESTINATION ${MLRUN_INSTALL_CMAKEDIR})
endif()
install(FILES ${_mlrun_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mlrun)

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/mlrunConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/mlrunConfig.cmake
  INSTALL_DESTINATION ${MLRUN_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/mlrunConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/mlrunConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/mlrunConfigVersion.cmake
        DESTINATION ${MLRUN_INSTALL_CMAKEDIR})

# pkg-config: relocatable (paths relative to the .pc file). The library is static, so its
# dependencies are in Libs/Requires, not in the .private fields: a plain `pkg-config --libs`
# must link.
file(RELATIVE_PATH MLRUN_PC_PREFIX_FROM_PCDIR
     /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" MLRUN_PC_PREFIX_FROM_PCDIR "${MLRUN_PC_PREFIX_FROM_PCDIR}")
set(MLRUN_PC_LIBS_EXTRA "-pthread")
if(CMAKE_DL_LIBS)
  string(APPEND MLRUN_PC_LIBS_EXTRA " -l${CMAKE_DL_LIBS}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/mlrun-rendezvous.pc.in
               ${PROJECT_BINARY_DIR}/cmake/mlrun-rendezvous.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/mlrun-rendezvous.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(MLRUN_HAS_GLOO)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/mlrun-rendezvous-gloo.pc.in
                 ${PROJECT_BINARY_DIR}/cmake/mlrun-rendezvous-gloo.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cmake/mlrun-rendezvous-gloo.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
