# check_prologue.sh: the set-up the one-call device check scripts share (sourced, not run):
#   check_prologue NAME   work folder W=/tmp/NAME (emptied), $OUT created; LD_LIBRARY_PATH=$BIN/../lib (the unpacked
#                         binaries' libraries, pack_binaries.sh) plus torch's cuDNN 9 where python finds it;
#                         HLM_GOLDEN_DIR defaulted to this checkout's tests/golden; on exit W is packed into
#                         $OUT/NAME.tgz (also after a timeout); the GPU's line opens W/summary.txt.
#   el TEXT...            prints TEXT after the seconds since check_prologue, and appends it to W/summary.txt
#   has PART              whether PART is in the comma-separated $PARTS
# The caller sets BIN, OUT and PARTS first.
check_prologue() {
  W=/tmp/$1
  rm -rf "$W"; mkdir -p "$W" "$OUT"
  export LD_LIBRARY_PATH=$BIN/../lib HLM_GOLDEN_DIR=${HLM_GOLDEN_DIR:-$PWD/tests/golden}
  local cudnn
  cudnn=$(python3 -c "import nvidia.cudnn,os;print(os.path.dirname(nvidia.cudnn.__file__)+'/lib')" 2>/dev/null)
  if [ -n "$cudnn" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cudnn; fi
  CHECK_NAME=$1
  trap 'tar czf "$OUT/$CHECK_NAME.tgz" -C /tmp "$CHECK_NAME"' EXIT
  CHECK_START=$(date +%s)
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee -a "$W/summary.txt"
}
el() { echo "[$(( $(date +%s) - CHECK_START )) s] $*" | tee -a "$W/summary.txt"; }
has() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
