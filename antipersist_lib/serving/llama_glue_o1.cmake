# Included after llama.cpp's project() calls (CMAKE_PROJECT_INCLUDE; serving/llama_build.py): compile the
# orchestration code (common, the server, its HTTP library, the multimodal library llama-server links) at -O1. It is JSON and
# template code whose speed is nothing next to the model's, and it is most of the first install's compile;
# ggml and libllama, where the model runs, keep the release -O3. A later -O wins on the compiler's line.
# KIT_GLUE_OPT: the level given to that code (perf/compile_profile.py compares others)
if (NOT DEFINED KIT_GLUE_OPT)
  set(KIT_GLUE_OPT -O1)
endif()
get_property(_kit_glue_deferred GLOBAL PROPERTY KIT_GLUE_DEFERRED)
if (NOT _kit_glue_deferred)
  set_property(GLOBAL PROPERTY KIT_GLUE_DEFERRED TRUE)
  function(_kit_glue_flags)
    foreach(target llama-common server-context llama-server-impl llama-server cpp-httplib mtmd)
      if (TARGET ${target})
        target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${KIT_GLUE_OPT}>)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _kit_glue_flags)
endif()
