# layerps-plan: prints placement plans (src/placement). Needs only the placement library
# and gflags: no transport, no roles.
if(TARGET layerps_placement)
  add_executable(layerps-plan layerps_plan.cc)
  target_link_libraries(layerps-plan PRIVATE layerps_placement gflags)
  target_compile_options(layerps-plan PRIVATE -Wall -Wextra -Wno-unused-parameter)
  install(TARGETS layerps-plan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
