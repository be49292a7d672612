# MKCACHE_SANITIZE=address;undefined or thread: instrument our targets.
set(MKCACHE_SANITIZE "" CACHE STRING "Sanitizers to build with (address, undefined, thread)")
function(mkcache_add_sanitizers target)
  if(MKCACHE_SANITIZE)
    string(REPLACE ";" "," _san "${MKCACHE_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${_san} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${_san})
  endif()
endfunction()
