# Sourced by the build scripts: compile through ccache where it is installed, with paths
# hashed relative to the checkout so that clones in other folders share one cache.
# CCACHE_DISABLE=1 in the environment measures a build without it.
mn_compiler_launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  mn_compiler_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
