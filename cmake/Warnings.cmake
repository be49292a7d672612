# Warnings for our own targets only (never for oneDNN's headers: they are
# included as SYSTEM through the imported target).
function(mkcache_set_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
      -Wnon-virtual-dtor -Wno-missing-field-initializers)
  endif()
endfunction()
