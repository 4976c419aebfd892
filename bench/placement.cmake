# Placement benchmarks (included from bench/CMakeLists.txt).

# layerps-optcnn-bench: search time of the optcnn strategy (bench/OPTCNN.md).
if(TARGET layerps_placement)
  add_executable(layerps-optcnn-bench optcnn_bench.cc)
  target_link_libraries(layerps-optcnn-bench PRIVATE layerps_placement)
  target_compile_options(layerps-optcnn-bench PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(LAYERPS_BUILD_TESTS)
    add_test(NAME optcnn_bench_smoke COMMAND layerps-optcnn-bench --repeats=1)
    set_tests_properties(optcnn_bench_smoke PROPERTIES TIMEOUT 300
                         LABELS "optcnn_bench_smoke;multiprocess")
  endif()
endif()
