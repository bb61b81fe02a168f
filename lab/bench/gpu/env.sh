# Sourced by lab/bench/gpu/run.sh and deploy/mps/gpu-check.sh: on a bare GPU
# machine (GPU, driver and a python3 with torch, nothing else), unpacks what
# it lacks from the folder $carry, and points the scripts at it. Sets
# FLEETSCRIBE_TRITONSERVER, FLEETSCRIBE_TRITON_VENV, bench and worker.
# Expects py, carry, work and log to be set. Where $carry does not exist
# (a host prepared by make deps), it does nothing.

# prepare_carried unpacks what a bare GPU machine lacks, from $carry:
# triton.tar.xz (the pinned server, as make deps installs it), numpy126.tar.xz
# (numpy 1.26 for the stub's environment), nemosite.tar.xz (NeMo and what it
# needs beyond the machine's packages), libpython3.12.so.1.0.xz (only used
# where the machine has no shared libpython), bins.tar.xz (gpubench, worker).
prepare_carried() {
  [[ -d "$carry" ]] || return 0
  mkdir -p "$work"
  if [[ -f "$carry/bins.tar.xz" && ! -x "$work/bin/worker" ]]; then
    mkdir -p "$work/bin" && tar -C "$work/bin" -xJf "$carry/bins.tar.xz"
  fi
  [[ -x "$work/bin/worker" ]] && { bench="$work/bin/gpubench"; worker="$work/bin/worker"; }
  local ver site
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
  if [[ -f "$carry/triton.tar.xz" && ! -d "$work/triton" ]]; then
    mkdir -p "$work/triton" && tar -C "$work/triton" -xJf "$carry/triton.tar.xz"
    cp "$work/triton/pytriton/tritonserver/python_backend_stubs/$ver/triton_python_backend_stub" \
      "$work/triton/pytriton/tritonserver/backends/python/"
  fi
  [[ -d "$work/triton" ]] && export FLEETSCRIBE_TRITONSERVER="$work/triton/pytriton/tritonserver/bin/tritonserver"
  if [[ -f "$carry/nemosite.tar.xz" && ! -d "$work/nemosite" ]]; then
    mkdir -p "$work/nemosite" && tar -C "$work/nemosite" -xJf "$carry/nemosite.tar.xz"
  fi
  if [[ -f "$carry/numpy126.tar.xz" && ! -d "$work/stubenv" ]]; then
    # The stub's Python: a virtual environment of the machine's Python with
    # numpy 1.26 first, then NeMo's extras, then the machine's packages.
    "$py" -m venv --without-pip "$work/stubenv"
    local sp; sp=$(echo "$work"/stubenv/lib/python3*/site-packages)
    tar -C "$sp" -xJf "$carry/numpy126.tar.xz"
    {
      [[ -d "$work/nemosite" ]] && echo "import site; site.addsitedir('$work/nemosite')"
      echo "import site; site.addsitedir('$site')"
      # The machine's scipy (built for numpy 2) names numpy.long and
      # numpy.exceptions.RankWarning, which numpy 1.26 has under other
      # names: the same objects under the names numpy 2 gives them (scipy
      # 1.17 then imports and runs with numpy 1.26).
      echo "import numpy, numpy.exceptions; numpy.long = getattr(numpy, 'long', numpy.int_); numpy.ulong = getattr(numpy, 'ulong', numpy.uint); numpy.exceptions.RankWarning = getattr(numpy.exceptions, 'RankWarning', numpy.RankWarning)"
    } >"$sp/fleetscribe-machine.pth"
  fi
  [[ -d "$work/stubenv" ]] && export FLEETSCRIBE_TRITON_VENV="$work/stubenv"
  # The stub links libpython$ver.so.1.0: the machine's, or the carried one.
  local libdir; libdir=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
  # grep reads the whole listing (no -q): under pipefail, a grep that stops
  # at the first match fails the pipeline whenever ldconfig is still writing.
  if ! ldconfig -p | grep "libpython$ver.so.1.0" >/dev/null; then
    if [[ -f "$libdir/libpython$ver.so.1.0" ]]; then
      export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    elif [[ -f "$carry/libpython$ver.so.1.0.xz" && -d "$work/triton" ]]; then
      xz -dc "$carry/libpython$ver.so.1.0.xz" >"$work/triton/nvidia_pytriton.libs/libpython$ver.so.1.0"
      log "libpython$ver.so.1.0: the machine has none; using the carried one"
    fi
  fi
  return 0
}

