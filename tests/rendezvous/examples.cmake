# The examples and the embedded server under real jobs, through mlrun (label rendezvous):
#   rdzv_example_gloo_allreduce   examples/gloo_allreduce, 4 workers
#   rdzv_example_custom_trainer   examples/custom_trainer alone: 4 processes, its own server
#   rdzv_example_nccl_unique_id   4 ranks print the NCCL unique ID; all must be identical
#                                 (skipped, 77, where libnccl.so.2 cannot be loaded)
#   rdzv_job_hostile_peer         a job completes while a hostile peer attacks its endpoint
#   rdzv_job_wrong_token          a client with a wrong token gets AuthError; the job goes on
#   rdzv_cli_mlrun_rdzv           `mlrun rdzv --port 0` serving the custom trainer
# Included from tests/rendezvous/CMakeLists.txt.
add_executable(rdzv_job_tool ${CMAKE_CURRENT_LIST_DIR}/job_tool.cc)
target_link_libraries(rdzv_job_tool PRIVATE mlrun_rendezvous)

set(_rdzv_dir ${CMAKE_CURRENT_LIST_DIR})

if(TARGET gloo_allreduce)
  add_test(NAME rdzv_example_gloo_allreduce
           COMMAND $<TARGET_FILE:mlrun> --nproc_per_node=4 --no_python
                   $<TARGET_FILE:gloo_allreduce>)
endif()

# Exit statuses decide: each example checks its own result and exits non-zero on a mismatch.
add_test(NAME rdzv_example_custom_trainer COMMAND custom_trainer 4)
set_tests_properties(rdzv_example_custom_trainer PROPERTIES
  ENVIRONMENT_MODIFICATION "MLRUN_RDZV_ENDPOINT=unset:;MLRUN_RDZV_TOKEN=unset:")

add_test(NAME rdzv_example_nccl_unique_id
         COMMAND /bin/sh ${_rdzv_dir}/nccl_id_test.sh $<TARGET_FILE:mlrun>
                 $<TARGET_FILE:nccl_unique_id>)
set_tests_properties(rdzv_example_nccl_unique_id PROPERTIES SKIP_RETURN_CODE 77)

add_test(NAME rdzv_job_hostile_peer
         COMMAND /bin/sh ${_rdzv_dir}/job_test.sh $<TARGET_FILE:mlrun> 4
                 ${_rdzv_dir}/hostile_job_rank.sh $<TARGET_FILE:rdzv_job_tool>
                 "bad frame from 127\\.0\\.0\\.1:[0-9]+"
                 "refused 127\\.0\\.0\\.1:[0-9]+: wrong token"
                 "hostile: 24 stalled connections held, 7 garbage cases refused")

add_test(NAME rdzv_job_wrong_token
         COMMAND /bin/sh ${_rdzv_dir}/job_test.sh $<TARGET_FILE:mlrun> 2
                 ${_rdzv_dir}/wrong_token_rank.sh $<TARGET_FILE:rdzv_job_tool>
                 "refused 127\\.0\\.0\\.1:[0-9]+: wrong token"
                 "refused as expected: rendezvous"
                 "rank 1 of 2: work done")

add_test(NAME rdzv_cli_mlrun_rdzv
         COMMAND /bin/sh ${_rdzv_dir}/rdzv_cli_test.sh $<TARGET_FILE:mlrun>
                 $<TARGET_FILE:custom_trainer>)

set_tests_properties(
  rdzv_example_custom_trainer rdzv_example_nccl_unique_id rdzv_job_hostile_peer
  rdzv_job_wrong_token rdzv_cli_mlrun_rdzv
  PROPERTIES LABELS rendezvous TIMEOUT 180)
if(TEST rdzv_example_gloo_allreduce)
  set_tests_properties(rdzv_example_gloo_allreduce PROPERTIES LABELS rendezvous TIMEOUT 180)
endif()
