# cmake -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR= -DCONSUMER_DIR= -DGENERATOR= -DCXX= [-DCXX_FLAGS=]
#       [-DLINK_FLAGS=] -P run.cmake
# Every step is bounded; any failure is a FATAL_ERROR (the test fails).
cmake_minimum_required(VERSION 3.25)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 240)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# 1. Install this build.
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/mlrun/rendezvous.hpp include/mlrun/rendezvous_export.hpp
          lib/libmlrun_rendezvous.a lib/cmake/mlrun/mlrunConfig.cmake
          lib/cmake/mlrun/mlrunConfigVersion.cmake lib/cmake/mlrun/mlrunTargets.cmake
          lib/pkgconfig/mlrun-rendezvous.pc bin/mlrun libexec/mlrun/mlrun-lifeline)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()
# The package must not point back into the source or build tree.
file(GLOB package_files ${prefix}/lib/cmake/mlrun/*.cmake ${prefix}/lib/pkgconfig/*.pc)
foreach(f ${package_files})
  file(READ ${f} text)
  foreach(tree ${SOURCE_DIR} ${BUILD_DIR})
    string(FIND "${text}" "${tree}/" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} refers to ${tree}")
    endif()
  endforeach()
endforeach()

# The installed mlrun starts the installed lifeline program (worker/lifeline.h): its worker reads
# the executable of its launcher's child called mlrun-lifeline.
file(WRITE ${WORK_DIR}/lifeline_exe.sh [=[
for p in /proc/[0-9]*; do
  if [ "$(cat "$p/comm" 2>/dev/null)" = mlrun-lifeline ] && [ "$(cut -d' ' -f4 "$p/stat")" = "$PPID" ]; then
    readlink "$p/exe"
  fi
done
]=])
step("the installed mlrun's lifeline" ${prefix}/bin/mlrun --nproc_per_node=1 --no_python sh
     ${WORK_DIR}/lifeline_exe.sh)
string(STRIP "${step_output}" lifeline_exe)
string(REGEX REPLACE "^\\[0\\] " "" lifeline_exe "${lifeline_exe}")  # the rank's prefix
file(REAL_PATH ${prefix}/libexec/mlrun/mlrun-lifeline expected_lifeline)
if(NOT lifeline_exe STREQUAL expected_lifeline)
  message(FATAL_ERROR "the installed mlrun's lifeline runs '${lifeline_exe}', not ${expected_lifeline}")
endif()

# 2. find_package(mlrun CONFIG): configure, build, run.
step("configure the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer
     -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
     "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}"
     -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step("run the consumer" ${WORK_DIR}/consumer/consumer)
message(STATUS "${step_output}")
if(EXISTS ${prefix}/lib/cmake/mlrun/mlrunGlooTargets.cmake)
  if(NOT EXISTS ${WORK_DIR}/consumer/consumer_gloo)
    message(FATAL_ERROR "mlrun was installed with GlooStore, but mlrun::rendezvous_gloo was not found")
  endif()
  step("run consumer_gloo" ${WORK_DIR}/consumer/consumer_gloo)
endif()

# 3. pkg-config: the same program, compiled with its flags alone.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config is not installed")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
step("pkg-config" ${PKG_CONFIG} --cflags --libs mlrun-rendezvous)
string(STRIP "${step_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(build_flags UNIX_COMMAND "${CXX_FLAGS} ${LINK_FLAGS}")
step("compile with pkg-config's flags" ${CXX} -std=c++20 ${build_flags}
     ${CONSUMER_DIR}/consumer.cc ${flags} -o ${WORK_DIR}/consumer_pc)
step("run the pkg-config build" ${WORK_DIR}/consumer_pc)
