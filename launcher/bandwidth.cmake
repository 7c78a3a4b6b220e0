# `mlrun doctor --bandwidth` (launcher/bandwidth.{h,cc}), included at the end of
# launcher/CMakeLists.txt. With Gloo (rendezvous/CMakeLists.txt builds mlrun_rendezvous_gloo where
# libgloo-dev is installed) the sweep is compiled in (MLRUN_HAVE_GLOO_SWEEP); without it
# `doctor --bandwidth` says that this mlrun was built without Gloo.
target_sources(mlrun_launcher PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bandwidth.cc)
if(TARGET mlrun_rendezvous_gloo)
  target_link_libraries(mlrun_launcher PUBLIC mlrun_rendezvous_gloo)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/bandwidth.cc PROPERTIES
    COMPILE_DEFINITIONS MLRUN_HAVE_GLOO_SWEEP)
endif()
target_sources(mlrun_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bandwidth_test.cc)
