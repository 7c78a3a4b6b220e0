# `mlrun rdzv` (launcher/rdzv_command.cc), included from launcher/CMakeLists.txt.
# MLRUN_HAVE_RDZV_COMMAND turns on run.cc's dispatch of `mlrun rdzv` to rdzv_command().
target_sources(mlrun_launcher PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/rdzv_command.cc)
target_compile_definitions(mlrun_launcher PRIVATE MLRUN_HAVE_RDZV_COMMAND)
