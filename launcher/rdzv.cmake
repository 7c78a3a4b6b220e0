# `mlrun rdzv` (launcher/rdzv_command.cc), included from launcher/CMakeLists.txt.
target_sources(mlrun_launcher PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/rdzv_command.cc)
