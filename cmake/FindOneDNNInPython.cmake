# Finds oneDNN v3.2 (CMake package `dnnl`, target DNNL::dnnl).
#
# First any prefix CMake already searches (CMAKE_PREFIX_PATH, dnnl_DIR);
# then the Python environment where the `onednn-devel-cpu-iomp` wheel put its
# CMake config (<prefix>/lib/cmake/dnnl), located through importlib.metadata
# rather than a guessed path.
#
# Sets MKCACHE_ONEDNN_LIBDIR: the directory holding libdnnl (and, in a wheel
# install, the Intel runtime libraries it needs).

find_package(dnnl 3.2 CONFIG QUIET)

if(NOT dnnl_FOUND)
  find_package(Python COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c [=[
import importlib.metadata as md, pathlib, sys
try:
    dist = md.distribution("onednn-devel-cpu-iomp")
except md.PackageNotFoundError:
    sys.exit("onednn-devel-cpu-iomp is not installed in this Python environment")
for f in dist.files or []:
    if f.name == "dnnl-config.cmake":
        print(pathlib.Path(dist.locate_file(f)).resolve().parent)
        break
else:
    sys.exit("onednn-devel-cpu-iomp has no dnnl-config.cmake")
]=]
    OUTPUT_VARIABLE _mkc_dnnl_dir
    ERROR_VARIABLE _mkc_dnnl_err
    RESULT_VARIABLE _mkc_dnnl_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _mkc_dnnl_rc EQUAL 0)
    message(FATAL_ERROR
      "oneDNN v3.2 not found. Install it with `pip install onednn-devel-cpu-iomp==2023.2.0` "
      "into the Python used by CMake (${Python_EXECUTABLE}) or pass CMAKE_PREFIX_PATH. "
      "Python said: ${_mkc_dnnl_err}")
  endif()
  find_package(dnnl 3.2 CONFIG REQUIRED PATHS "${_mkc_dnnl_dir}" NO_DEFAULT_PATH)
endif()

get_target_property(_mkc_dnnl_loc DNNL::dnnl IMPORTED_LOCATION_RELEASE)
if(NOT _mkc_dnnl_loc)
  get_target_property(_mkc_dnnl_loc DNNL::dnnl LOCATION)
endif()
get_filename_component(MKCACHE_ONEDNN_LIBDIR "${_mkc_dnnl_loc}" DIRECTORY)
message(STATUS "mkcache: oneDNN ${dnnl_VERSION} from ${MKCACHE_ONEDNN_LIBDIR}")
