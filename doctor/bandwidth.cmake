# `mlrun doctor --bandwidth` (launcher/bandwidth.{h,cc}), included from
# doctor/CMakeLists.txt. The launcher gets the pure parts (options, table, verdict); each rank
# of the sweep runs mlrun-allreduce-sweep, placed next to mlrun: the NCCL path always (it loads
# CUDA and NCCL with dlopen, so no CUDA is needed to build it), the Gloo path where Gloo is
# (rendezvous/CMakeLists.txt makes mlrun_rendezvous_gloo where libgloo-dev is installed). Neither
# Gloo nor CUDA is ever loaded by mlrun itself, whose memory stays small.
target_sources(mlrun_launcher PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bandwidth.cc)
add_executable(mlrun_allreduce_sweep ${CMAKE_CURRENT_LIST_DIR}/bandwidth_main.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/bandwidth.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/nccl_sweep.cc
                                     ${PROJECT_SOURCE_DIR}/launcher/flags.cc
                                     ${PROJECT_SOURCE_DIR}/launcher/option_env.cc
                                     ${PROJECT_SOURCE_DIR}/launcher/options.cc)
target_compile_definitions(mlrun_allreduce_sweep PRIVATE MLRUN_SWEEP_PROGRAM)
target_include_directories(mlrun_allreduce_sweep PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(mlrun_allreduce_sweep
  PRIVATE mlrun_rendezvous mlrun_fmt nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS})
if(TARGET mlrun_rendezvous_gloo)
  target_compile_definitions(mlrun_allreduce_sweep PRIVATE MLRUN_HAVE_GLOO_SWEEP)
  target_link_libraries(mlrun_allreduce_sweep PRIVATE mlrun_rendezvous_gloo)
endif()
set_target_properties(mlrun_allreduce_sweep PROPERTIES
  OUTPUT_NAME mlrun-allreduce-sweep RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
install(TARGETS mlrun_allreduce_sweep RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
add_dependencies(mlrun mlrun_allreduce_sweep)
# The unit tests run the NCCL loader (without CUDA it must fail with a clear message).
target_sources(mlrun_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bandwidth_test.cc
                                        ${CMAKE_CURRENT_LIST_DIR}/nccl_sweep.cc)
