#!/usr/bin/env bash
# Install test: `cmake --install BUILD --prefix TMP`, then tests/install/hello_refit.c built
# against TMP twice, with pkg-config (refit.pc) and with the CMake package (find_package(refit),
# refit::refit), each run on 2 ranks against TMP's librefit.so (its SONAME resolved there); then
# the Python package installed by pip from python/ (offline, into TMP) imported against TMP's
# librefit.so through REFIT_LIB.
#   install_test.sh BUILD_DIR SOURCE_DIR TOPOLOGY MPIEXEC
set -euo pipefail
build=$1 src=$(cd "$2" && pwd) topo=$3 mpiexec=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(dirname "$(find "$tmp/prefix" -name refit.pc)")/..
for f in librefit.so librefit.a pkgconfig/refit.pc cmake/refit/refitConfig.cmake; do
  [ -e "$libdir/$f" ] || { echo "install_test: $f not installed"; exit 1; }
done
[ -e "$tmp/prefix/include/refit/refit.h" ] || { echo "install_test: refit/refit.h not installed"; exit 1; }
soname=$(readelf -d "$libdir/librefit.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
abi=$(sed -n 's/^#define RF_SESSION_ABI_VERSION \([0-9]*\).*/\1/p' "$src/include/refit/session.h")
[ "$soname" = "librefit.so.$abi" ] && [ -e "$libdir/$soname" ] ||
  { echo "install_test: SONAME '$soname', expected librefit.so.$abi (RF_SESSION_ABI_VERSION)"; exit 1; }
# pkg-config (relocatable: the .pc finds its prefix from its own folder)
PKG_CONFIG_PATH="$libdir/pkgconfig" cc -std=c11 -Wall -Werror -o "$tmp/hello_pc" \
  "$src/tests/install/hello_refit.c" $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs refit)
# the CMake package
mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(hello_refit C)
find_package(refit 0.1 REQUIRED)
add_executable(hello_cm $src/tests/install/hello_refit.c)
target_link_libraries(hello_cm PRIVATE refit::refit)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/b" >/dev/null
for exe in "$tmp/hello_pc" "$tmp/cm/b/hello_cm"; do
  LD_LIBRARY_PATH="$libdir" ldd "$exe" | grep "$soname" | grep -q "$tmp" ||
    { echo "install_test: $exe does not load $soname from the prefix"; exit 1; }
  out=$(LD_LIBRARY_PATH="$libdir" "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none \
        -x LD_LIBRARY_PATH -np 2 "$exe" "$topo")
  echo "$out"
  echo "$out" | grep -q "rank 0: trainer" && echo "$out" | grep -q "rank 1: rollout" ||
    { echo "install_test: $exe: unexpected output"; exit 1; }
done
# pip: from a copy of python/ (setuptools writes build/ and *.egg-info beside the sources)
cp -r "$src/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/tests"
/usr/bin/python3 -m pip install --quiet --no-deps --no-build-isolation --no-index \
  --target "$tmp/site" "$tmp/pysrc" ||
  { echo "install_test: pip install python/ failed"; exit 1; }
got=$(cd "$tmp" && REFIT_LIB="$libdir/$soname" PYTHONPATH="$tmp/site" /usr/bin/python3 -c \
      'import refit; print(refit.__file__); print(refit.ABI_VERSION)')
echo "$got"
[ "$(echo "$got" | sed -n 1p)" = "$tmp/site/refit/__init__.py" ] && [ "$(echo "$got" | sed -n 2p)" = "$abi" ] ||
  { echo "install_test: the pip-installed package did not import from $tmp/site with ABI $abi"; exit 1; }
echo "install_test: ok"
