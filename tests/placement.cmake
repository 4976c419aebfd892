# Placement unit tests: a pure library, so they link layerps_placement and GoogleTest only.
if(TARGET layerps_placement)
  add_executable(placement_test
    placement/profile_test.cc
    placement/plan_test.cc
    placement/json_test.cc)
  target_link_libraries(placement_test PRIVATE layerps_placement GTest::gtest GTest::gtest_main)
  target_compile_options(placement_test PRIVATE -Wall -Wextra -Wno-unused-parameter)
  gtest_discover_tests(placement_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
  layerps_label_discovered(placement_test unit)
endif()

# layerps-plan from the outside: its choices, its files, and exit 2 on every bad input.
if(TARGET layerps-plan)
  add_test(NAME placement_plan_cli
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/placement/plan_cli_test.sh $<TARGET_FILE:layerps-plan>)
  set_tests_properties(placement_plan_cli PROPERTIES TIMEOUT 120)
  layerps_tier_test(placement_plan_cli multiprocess)
endif()

# layerps-scheduler --plan: the plan put in force, and its bad inputs.
if(TARGET layerps-plan AND TARGET layerps-scheduler)
  add_test(NAME scheduler_plan_cli
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/placement/scheduler_plan_test.sh
            $<TARGET_FILE:layerps-plan> $<TARGET_FILE:layerps-scheduler>)
  set_tests_properties(scheduler_plan_cli PROPERTIES TIMEOUT 60)
  layerps_tier_test(scheduler_plan_cli multiprocess)
endif()
