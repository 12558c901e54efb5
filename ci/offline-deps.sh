#!/usr/bin/env bash
# The build's Debian libraries for a machine without a package registry (an air-gapped GPU server).
#
#   ci/offline-deps.sh download DIR          on a connected Debian 12 x86-64 machine (no root needed):
#                                            fetches the .deb files of ci/packages.sh's libraries and of
#                                            the libraries they depend on into DIR, writes DIR/MANIFEST
#   ci/offline-deps.sh install DIR PREFIX    on the offline machine (no apt, no root): checks DIR against
#                                            its MANIFEST, unpacks every .deb and moves its usr/ to PREFIX,
#                                            then prints the cmake command that builds against PREFIX
#
# The conventional DIR is offline-deps/ in the checkout (git ignores it). The offline machine is
# expected to have the toolchain already: glibc, g++ and its runtime libraries, CMake, Ninja,
# python3 (ci/packages.sh's tools); dependencies that are part of those are not downloaded
# (download prints them). compare.py and scipy (the optional check of bench-smoke) are not
# carried: bench-smoke says it skipped that check. The packages are built with GCC 12 against
# glibc 2.36: the offline machine needs glibc >= 2.33 and libstdc++ of GCC >= 12 (GLIBCXX_3.4.30).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ci/packages.sh
source "$here/packages.sh"
staging=""  # install's unpacking directory, removed on exit

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() { echo "offline-deps: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "needs '$1' on PATH${2:+ ($2)}"; }
abspath() { mkdir -p "$1" && (cd "$1" && pwd); }

# Packages a machine with a C++ compiler already has, or that the build does not use: the C
# library and its headers, GCC and its runtime libraries (libstdc++, libgomp, libquadmath, the
# sanitizer runtimes), binutils, what libc6-dev's RPC headers pull in (Kerberos, OpenSSL), the
# build tools and Debian's own machinery. The dependency walk stops at them.
base_package_regex='^(libc6|libc6-dev|libc-dev-bin|libc-bin|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc[0-9a-z-]*|rpcsvc-proto|linux-libc-dev|gcc(-[0-9]+)?(-base)?|g\+\+(-[0-9]+)?|cpp(-[0-9]+)?|libgcc-s1|libgcc(-[0-9]+)?-dev|libstdc\+\+6|libstdc\+\+-[0-9]+-dev|lib(a|l|t|ub|hwa)san[0-9]+|libgomp1|libatomic1|libitm1|libquadmath0|libcc1-0|binutils.*|libbinutils|libctf.*|libgprofng.*|libjansson4|libisl[0-9]+|libmpc[0-9]+|libmpfr[0-9]+|libgmp10|zlib1g|libzstd1|libssl3|libkrb5-3|libkrb5support0|libk5crypto3|libgssapi-krb5-2|libkeyutils1|libcom-err2|pkg-config|pkgconf|pkgconf-bin|libpkgconf3|cmake|cmake-data|ninja-build|make|python3.*|libpython3.*|dpkg|dpkg-dev|perl.*|debconf|libselinux1)$'

# The dependency closure of the library packages, walking Depends and Pre-Depends (not
# Recommends or Suggests) and stopping at base packages. Prints "keep NAME" and "base NAME".
resolve() {
  local -A seen=()
  local queue=("$@") p deps
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    p=${p%:any}
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    if [[ $p =~ $base_package_regex ]]; then
      echo "base $p"
      continue
    fi
    echo "keep $p"
    # One line per dependency group: the first alternative, or for a virtual package (<name>)
    # its first provider (the indented line that follows it).
    deps=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
             --no-replaces --no-enhances "$p" | awk '
      function flush() { if (pick != "") print pick; pick = ""; want = 0 }
      /^ *[|]?(Pre)?Depends: / {
        if (ended) flush()
        if (pick == "") { if ($2 ~ /^</) want = 1; else pick = $2 }
        ended = ($1 !~ /^[|]/)
        next
      }
      /^    [^ ]/ { if (pick == "" && want) pick = $1 }
      END { flush() }
    ') || die "apt-cache depends $p failed"
    # shellcheck disable=SC2206
    queue+=($deps)
  done
}

cmd_download() {
  [ $# -eq 1 ] || usage
  need apt-get "Debian's apt"; need apt-cache; need dpkg-deb; need sha256sum
  local dir
  dir=$(abspath "$1")
  for p in "${attn_library_packages[@]}"; do
    apt-cache show --no-all-versions "$p" >/dev/null 2>&1 ||
      die "apt knows no package '$p' (run apt-get update; this is meant for Debian 12)"
  done

  local resolved keep=() base=()
  resolved=$(resolve "${attn_library_packages[@]}")
  mapfile -t keep < <(awk '$1 == "keep" {print $2}' <<<"$resolved" | sort -u)
  mapfile -t base < <(awk '$1 == "base" {print $2}' <<<"$resolved" | sort -u)
  echo "offline-deps: ${#keep[@]} packages: ${keep[*]}"
  echo "offline-deps: assumed present on the offline machine (not downloaded): ${base[*]}"

  # A fresh download each time: the previous .deb files and manifest go.
  rm -f "$dir"/*.deb "$dir/MANIFEST"
  (cd "$dir" && apt-get download -q "${keep[@]}") || die "apt-get download failed (apt-get update first?)"

  local manifest="$dir/MANIFEST" total=0 f pkg ver sum size n=0
  {
    echo "# attnbench offline dependencies: package version file sha256 (ci/offline-deps.sh)"
    echo "# downloaded $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}") $(dpkg --print-architecture 2>/dev/null)"
  } >"$manifest"
  printf '%-28s %-28s %10s\n' package version bytes
  for p in "${keep[@]}"; do
    f=$(cd "$dir" && ls -1 -- "${p}"_*.deb 2>/dev/null | head -n 1) || true
    [ -n "$f" ] || die "apt-get download did not fetch $p"
    pkg=$(dpkg-deb -f "$dir/$f" Package)
    ver=$(dpkg-deb -f "$dir/$f" Version)
    sum=$(sha256sum "$dir/$f" | cut -d' ' -f1)
    size=$(stat -c %s "$dir/$f")
    printf '%s\t%s\t%s\t%s\n' "$pkg" "$ver" "$f" "$sum" >>"$manifest"
    printf '%-28s %-28s %10s\n' "$pkg" "$ver" "$size"
    total=$((total + size))
    n=$((n + 1))
  done
  echo "offline-deps: $n .deb files, $total bytes ($((total / 1024 / 1024)) MiB) in $dir, manifest $manifest"
  echo "offline-deps: copy $dir to the offline machine, then: bash ci/offline-deps.sh install DIR PREFIX"
}

# Unpacks one .deb into a directory: dpkg-deb where there is one, else ar and tar (binutils
# comes with the compiler). ATTN_OFFLINE_NO_DPKG=1 forces the second way (to test it).
unpack_deb() {
  local deb=$1 into=$2
  if [ -z "${ATTN_OFFLINE_NO_DPKG:-}" ] && command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$into"
    return
  fi
  local tmp member
  tmp=$(mktemp -d)
  (cd "$tmp" && ar x "$deb") || { rm -rf "$tmp"; die "ar could not read $deb"; }
  member=$(cd "$tmp" && ls -1 data.tar* 2>/dev/null | head -n 1)
  [ -n "$member" ] || { rm -rf "$tmp"; die "$deb has no data.tar member"; }
  tar -xf "$tmp/$member" -C "$into" || { rm -rf "$tmp"; die "tar could not unpack $member of $deb"; }
  rm -rf "$tmp"
}

cmd_install() {
  [ $# -eq 2 ] || usage
  need sha256sum; need tar
  command -v dpkg-deb >/dev/null 2>&1 || need ar "binutils: unpacks .deb files where dpkg is missing"
  local dir prefix manifest
  [ -d "$1" ] || die "no directory $1 (made by: ci/offline-deps.sh download $1)"
  dir=$(cd "$1" && pwd)
  manifest="$dir/MANIFEST"
  [ -f "$manifest" ] || die "no $manifest (made by: ci/offline-deps.sh download DIR)"

  # Every file the manifest names, unchanged; and nothing in DIR that it does not name.
  local pkg ver file sum bad=0 debs=() listed=()
  while IFS=$'\t' read -r pkg ver file sum; do
    case $pkg in '#'* | '') continue ;; esac
    [ -n "$sum" ] || die "malformed MANIFEST line for $pkg"
    if [ ! -f "$dir/$file" ]; then
      echo "offline-deps: missing $file ($pkg $ver)" >&2; bad=1; continue
    fi
    if [ "$(sha256sum "$dir/$file" | cut -d' ' -f1)" != "$sum" ]; then
      echo "offline-deps: checksum mismatch: $file ($pkg $ver)" >&2; bad=1; continue
    fi
    debs+=("$dir/$file")
    listed+=("$file")
  done <"$manifest"
  [ "$bad" -eq 0 ] || die "DIR does not match its MANIFEST; download it again"
  [ ${#debs[@]} -gt 0 ] || die "MANIFEST lists no packages"
  for f in "$dir"/*.deb; do
    [[ " ${listed[*]} " == *" $(basename "$f") "* ]] || echo "offline-deps: ignoring $(basename "$f") (not in MANIFEST)" >&2
  done
  echo "offline-deps: ${#debs[@]} packages match MANIFEST (sha256)"

  # PREFIX is ours alone: made fresh, or replaced if an earlier install made it.
  local marker=.attnbench-offline-deps
  if [ -e "$2" ] && [ -n "$(ls -A "$2" 2>/dev/null)" ]; then
    [ -f "$2/$marker" ] || die "$2 exists and was not made by this script; give an empty or new PREFIX"
    rm -rf "$2"
  fi
  prefix=$(abspath "$2")
  case $prefix in /usr | /usr/*) die "PREFIX must not be under /usr" ;; esac

  staging=$(mktemp -d "$prefix.staging.XXXXXX")
  trap 'rm -rf "$staging"' EXIT
  for deb in "${debs[@]}"; do unpack_deb "$deb" "$staging"; done
  local outside
  outside=$(cd "$staging" && find . -mindepth 1 -maxdepth 1 ! -name usr -printf '%P ')
  [ -z "$outside" ] || echo "offline-deps: left out (outside usr/): $outside"
  [ -d "$staging/usr" ] || die "the packages hold nothing under usr/"
  shopt -s dotglob
  mv "$staging"/usr/* "$prefix"/
  shopt -u dotglob

  # Absolute symbolic links into /usr would reach the host's files: point them into PREFIX.
  local link target n_links=0
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    case $target in
      /usr/*) ln -sfn "$prefix/${target#/usr/}" "$link"; n_links=$((n_links + 1)) ;;
      /*) echo "offline-deps: warning: $link points outside the prefix: $target" >&2 ;;
    esac
  done < <(find "$prefix" -type l -print0)

  # pkg-config files name their install prefix (prefix=/usr, libdir=/usr/lib/...): point them at
  # PREFIX. The build does not read them, but a tool that does should not find the host's copies.
  local n_pc=0 f
  while IFS= read -r -d '' f; do
    if grep -qE '=/usr(/|$)' "$f"; then
      sed -E -i "s#=/usr(/|\$)#=$prefix\1#" "$f"
      n_pc=$((n_pc + 1))
    fi
  done < <(find "$prefix" -name '*.pc' -type f -print0)
  echo "offline-deps: pointed $n_links absolute links and $n_pc pkg-config files at $prefix"

  # CMake package files. Debian's compute their prefix from their own location; the only /usr
  # they name is CMake's "/usr move" guard (use the original prefix when the file's real path
  # is the original one, i.e. only when loaded from /usr itself), which never fires here. Any
  # other /usr would resolve to the host's copy: say so.
  local left
  left=$(find "$prefix" -name '*.cmake' -type f -print0 | xargs -0 -r awk '
    FNR == 1 { guard = 0 }
    /if\(_realCurr STREQUAL _realOrig\)/ { guard = 1 }
    /(^|[^A-Za-z0-9_.\/-])\/usr(\/|")/ && !guard && $0 !~ /^[ \t]*#/ && $0 !~ /_realOrig "\/usr/ {
      print FILENAME ":" FNR ": " $0
    }
    /endif\(\)/ { guard = 0 }
  ')
  if [ -n "$left" ]; then
    echo "offline-deps: warning: CMake files that name the host's /usr (they may find its copies):" >&2
    echo "$left" >&2
  fi

  {
    echo "made by ci/offline-deps.sh install from $dir"
    grep -v '^#' "$manifest"
  } >"$prefix/$marker"
  # Debian 12's shared libraries need glibc >= 2.33 and GCC 12's libstdc++ at run time.
  local glibc libstdcxx
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [ -n "$glibc" ] && [ "$(printf '%s\n' 2.33 "$glibc" | sort -V | head -n 1)" != 2.33 ]; then
    echo "offline-deps: warning: glibc $glibc is older than 2.33: libfmt and libbenchmark will not load" >&2
  fi
  libstdcxx=$(c++ -print-file-name=libstdc++.so.6 2>/dev/null || true)
  if [ -f "$libstdcxx" ] && ! grep -qa GLIBCXX_3.4.30 "$libstdcxx"; then
    echo "offline-deps: warning: $libstdcxx lacks GLIBCXX_3.4.30 (GCC 12): libbenchmark will not load" >&2
  fi

  echo "offline-deps: installed into $prefix"
  echo "offline-deps: next, from the checkout:"
  echo "  cmake --preset gpu -DCMAKE_PREFIX_PATH=$prefix && cmake --build --preset gpu"
  echo "  bash ci/gpu-suite.sh results/gpu --prefix $prefix"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  download) cmd_download "$@" ;;
  install) cmd_install "$@" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
