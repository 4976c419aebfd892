# optcnn_test: the OptCNN search against brute force, the cost tables of the built-in
# profiles, and the errors. Links the pure placement library and GoogleTest only.
if(TARGET layerps_placement)
  add_executable(optcnn_test placement/optcnn_test.cc)
  target_link_libraries(optcnn_test PRIVATE layerps_placement GTest::gtest GTest::gtest_main)
  target_compile_options(optcnn_test PRIVATE -Wall -Wextra -Wno-unused-parameter)
  gtest_discover_tests(optcnn_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
  layerps_label_discovered(optcnn_test unit)
endif()
