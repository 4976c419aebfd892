# Installs the build into a fresh prefix and builds tests/consumer against it once, the
# way WAY says: find_package (find_package(LayerPS), the static library's test in CTest) or
# pkg-config (the flags of the installed layerps.pc, scripts/test-shared.sh for the shared
# library); runs it. With find_package it also builds and runs docs/cpp.md's walkthrough
# (first_worker/) under the installed layerps-launch.
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

# docs/cpp.md's walkthrough ("A first program: build, link, run"): its two files are
# first_worker/ here, word for word (checked), built against the same install and run
# under the installed layerps-launch with 2 servers and 2 workers, as the page says.
get_filename_component(doc ${SOURCE_DIR}/../../docs/cpp.md ABSOLUTE)
file(READ ${doc} doc_text)
foreach(f CMakeLists.txt first_worker.cc)
  file(READ ${SOURCE_DIR}/first_worker/${f} f_text)
  string(FIND "${doc_text}" "${f_text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "docs/cpp.md does not show tests/consumer/first_worker/${f} as it is: "
                        "update the page's walkthrough (or the file) so that they agree")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/first_worker -B ${WORK_DIR}/first_worker
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "configuring first_worker failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/first_worker RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building first_worker failed: ${rc}")
endif()
if(EXISTS ${WORK_DIR}/prefix/bin/layerps-launch)
  execute_process(COMMAND ${WORK_DIR}/prefix/bin/layerps-launch --num_servers=2 --num_workers=2
                          --timeout_s=120 -- ${WORK_DIR}/first_worker/first_worker
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(REGEX MATCHALL "as expected" seen "${out}")
  list(LENGTH seen n)
  if(rc OR NOT n EQUAL 2)
    message(FATAL_ERROR "first_worker under layerps-launch: exit ${rc}, ${n} of 2 workers as "
                        "expected:\n${out}")
  endif()
  message(STATUS "${out}")
else()
  message(STATUS "first_worker built; not run: the install has no bin/layerps-launch "
                 "(LAYERPS_BUILD_TOOLS=OFF)")
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
