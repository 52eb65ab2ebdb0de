# Installs the rcjit build into a scratch prefix, then configures, builds and runs the
# consumer project against it. With -DUSE_BUILD_TREE=ON, configures the consumer against the
# build tree itself instead (rcjit_DIR=<build>, nothing installed). Fails (non-zero) at the
# first step that fails.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: step failed (${rc}): ${ARGN}")
  endif()
endfunction()
if(USE_BUILD_TREE)
  step(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${WORK_DIR}/build -Drcjit_DIR=${RCJIT_BINARY_DIR})
  step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
  # the consumer's build RUNPATH finds the build tree's librcjit.so
  step(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK_DIR}/build/consumer)
  return()
endif()
step(${CMAKE_COMMAND} --install ${RCJIT_BINARY_DIR} --prefix ${prefix})
step(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib ${WORK_DIR}/build/consumer)
# The installed tool starts by itself: its RUNPATH finds lib/librcjit.so, whose RUNPATH finds
# libLLVM (no LD_LIBRARY_PATH).
step(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${prefix}/bin/rcjit --help)
step(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${prefix}/bin/rcjit models)
# The installed tool runs an exported ONNX model (tests/data/onnx, scripts/onnx_fixtures.py)
# compiled, and its outputs match onnxruntime's.
set(fx ${CONSUMER_SOURCE}/../data/onnx/bert)
step(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${prefix}/bin/rcjit run ${fx}/model.onnx
  --input input_ids=${fx}/case1/input_ids.npy --input attention_mask=${fx}/case1/attention_mask.npy
  --mode full --reps 1 --expected ${fx}/case1/expected)
