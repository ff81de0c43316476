#!/bin/sh
# A `RUSTC` for `cargo +nightly fuzz` when the nightly toolchain has no wasm32-wasip2
# standard library (rustup may not ship it for every nightly): host/build.rs's guest build
# (its target directory ends in `wasm-plugins`) and anything for wasm32-wasip2 use the
# stable compiler; everything else, the instrumented host build included, nightly's.
# Usage (from fuzz/): RUSTC=$PWD/rustc-split.sh cargo +nightly fuzz build
stable=$(rustup which --toolchain stable rustc) || exit 1
case "$CARGO_TARGET_DIR" in
  *wasm-plugins) exec "$stable" "$@" ;;
esac
for arg in "$@"; do
  [ "$arg" = wasm32-wasip2 ] && exec "$stable" "$@"
done
exec "$(rustup which --toolchain nightly rustc)" "$@"
