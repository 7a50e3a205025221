#!/usr/bin/env bash
# Checks pack_binaries.sh's PIECE_MB=auto: with the carry limit set just above the tracked tree as it travels (a tar
# of the tracked files), an archive of /bin/ls and its libraries is split into the fewest equal pieces that fit the
# room left, each no larger than it, and the pieces joined are the archive (its listing holds bin/ls); a limit below
# the tree is refused. Run by ctest (device_pack_pieces, label cpu): exit 0 when every check holds.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(git -C "$here" rev-parse --show-toplevel)" || { echo "FAIL: not in a git checkout"; exit 1; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
tree=$(cd "$root" && git ls-files -z | tar --null -T - -cf - | wc -c)
room=$(( 128 * 1024 ))
out="$(CARRY_LIMIT_BYTES=$(( tree + room )) RESERVE_MB=0 PIECE_MB=auto bash "$here/pack_binaries.sh" "$dir/t.tgz" /bin/ls 2>&1)" \
  || { echo "FAIL: pack_binaries exited non-zero: $out"; exit 1; }
bad=0
pieces=("$dir"/t.tgz.part.*)
joined=$(cat "${pieces[@]}" | wc -c)
want=$(( (joined + room - 1) / room ))
[ "${#pieces[@]}" -eq "$want" ] || { echo "FAIL: ${#pieces[@]} pieces of $joined bytes, want $want for room $room"; bad=1; }
[ "$want" -ge 2 ] || { echo "FAIL: the archive ($joined bytes) fits one piece; the check needs a larger program"; bad=1; }
for p in "${pieces[@]}"; do
  size=$(stat -c %s "$p")
  [ "$size" -le "$room" ] || { echo "FAIL: $p has $size bytes, over the room of $room"; bad=1; }
done
cat "${pieces[@]}" | tar tz | grep -qx 'bin/ls' || { echo "FAIL: the joined pieces do not list bin/ls"; bad=1; }
[ ! -e "$dir/t.tgz" ] || { echo "FAIL: the archive was kept beside its pieces"; bad=1; }
if CARRY_LIMIT_BYTES=$(( tree - 1 )) PIECE_MB=auto bash "$here/pack_binaries.sh" "$dir/u.tgz" /bin/ls >"$dir/err" 2>&1; then
  echo "FAIL: a carry limit below the tree was accepted"; bad=1
elif ! grep -q "leaves no room" "$dir/err"; then
  echo "FAIL: the refusal does not say why: $(cat "$dir/err")"; bad=1
fi
[ "$bad" -eq 0 ] && echo "ok: ${#pieces[@]} pieces of ≤ $room bytes, joined $joined bytes"
exit "$bad"
