#!/usr/bin/env bash
# Checks that make release is reproducible: two clones of HEAD, in different
# directories, build the release and must give the same SHA256SUMS. Then
# checks what an archive holds and that its binary reports the version.
# Uncommitted changes are not part of the test: it builds the commit.
#
# The two builds share the Go build cache, as two releases on one machine
# would; what the comparison catches is what differs between them anyway:
# an untrimmed path, a build time, an archive's times, owners or order.
#
# usage: scripts/test-release.sh [VERSION]   (make test-release; PLATFORMS
# narrows the platforms, default all four)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-v0.0.0-reproducible}
read -r -a platforms <<<"${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
commit=$(git -C "$root" rev-parse HEAD)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for n in a bb; do
  git clone --quiet --shared --no-checkout "$root" "$tmp/$n/queuebox"
  git -C "$tmp/$n/queuebox" checkout --quiet --detach "$commit"
  (cd "$tmp/$n/queuebox" && make --no-print-directory release VERSION="$version" DIST="$tmp/dist-$n" PLATFORMS="${platforms[*]}") \
    >"$tmp/$n.log" 2>&1 || { cat "$tmp/$n.log"; exit 1; }
done
if ! cmp -s "$tmp/dist-a/SHA256SUMS" "$tmp/dist-bb/SHA256SUMS"; then
  echo "test-release: two builds of $commit differ:" >&2
  diff "$tmp/dist-a/SHA256SUMS" "$tmp/dist-bb/SHA256SUMS" >&2 || true
  exit 1
fi
(cd "$tmp/dist-a" && sha256sum --check --quiet SHA256SUMS)
for platform in "${platforms[@]}"; do
  grep -q " queuebox_${version}_${platform/\//_}.tar.gz\$" "$tmp/dist-a/SHA256SUMS" ||
    { echo "test-release: SHA256SUMS lacks $platform" >&2; exit 1; }
done

p=${platforms[0]/\//_}
archive="$tmp/dist-a/queuebox_${version}_$p.tar.gz"
want="queuebox_${version}_$p/
queuebox_${version}_$p/LICENSE
queuebox_${version}_$p/README.md
queuebox_${version}_$p/config.example.yaml
queuebox_${version}_$p/queuebox"
got=$(tar -tzf "$archive")
if [[ $got != "$want" ]]; then
  printf 'test-release: %s holds\n%s\nwant\n%s\n' "$archive" "$got" "$want" >&2
  exit 1
fi
tar -xzf "$archive" -C "$tmp"
bin="$tmp/queuebox_${version}_$p/queuebox"
if [[ $p == linux_amd64 && $(uname -s)/$(uname -m) == Linux/x86_64 ]]; then
  # Read once, then match: under pipefail, grep -q leaving at its first
  # match can end the writer with SIGPIPE and fail the pipeline.
  out=$("$bin" version)
  printf '%s\n' "$out"
  grep -q "^queuebox $version\$" <<<"$out" || { echo "test-release: the binary does not report $version" >&2; exit 1; }
  grep -q "revision: *$commit\$" <<<"$out" || { echo "test-release: wrong revision" >&2; exit 1; }
fi
if grep -q dynamically <<<"$(file "$bin" 2>/dev/null)"; then
  echo "test-release: $bin is dynamically linked" >&2
  exit 1
fi
echo "test-release: two builds of $commit gave the same SHA256SUMS:"
cat "$tmp/dist-a/SHA256SUMS"
