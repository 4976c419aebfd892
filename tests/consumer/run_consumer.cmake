# Installs the build into a fresh prefix and builds tests/consumer against it once, the
# way WAY says: find_package (find_package(LayerPS), the static library's test in CTest) or
# pkg-config (the flags of the installed layerps.pc, scripts/test-shared.sh for the shared
# library); runs it.
# Arguments: -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR= -DVERSION= (the version it must report)
# -DLIBDIR= (CMAKE_INSTALL_LIBDIR) -DWAY=find_package|pkg-config
if(NOT WAY STREQUAL "find_package" AND NOT WAY STREQUAL "pkg-config")
  message(FATAL_ERROR "WAY must be find_package or pkg-config, not '${WAY}'")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
if(WAY STREQUAL "find_package")
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer ${VERSION} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()

endif()

if(WAY STREQUAL "pkg-config")
# The program built with the flags pkg-config gives for the installed layerps.pc.
set(pc_dir ${WORK_DIR}/prefix/${LIBDIR}/pkgconfig)
if(NOT EXISTS ${pc_dir}/layerps.pc)
  message(FATAL_ERROR "the install has no ${LIBDIR}/pkgconfig/layerps.pc")
endif()
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --modversion layerps OUTPUT_VARIABLE pc_version
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc OR NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion layerps: '${pc_version}' (rc ${rc}), expected ${VERSION}")
endif()
execute_process(COMMAND pkg-config --cflags --libs layerps OUTPUT_VARIABLE pc_flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "pkg-config --cflags --libs layerps failed: ${rc}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
execute_process(COMMAND c++ -std=c++17 -O1 ${SOURCE_DIR}/main.cc ${pc_flags}
                        -o ${WORK_DIR}/consumer_pc RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer with pkg-config failed: ${rc} (flags: ${pc_flags})")
endif()
execute_process(COMMAND ${WORK_DIR}/consumer_pc ${VERSION} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the pkg-config consumer failed: ${rc}")
endif()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
