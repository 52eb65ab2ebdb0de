# Shared by gpu_bundle.sh and gpu_rehearsal.sh (sourced): the base set of libraries a bundle
# may take from the machine it runs on, and the check that it needs nothing else.

# glibc's libraries (the loader included), libstdc++ and libgcc_s: on every machine we target.
is_base_lib() {
  case "$1" in
  linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.6 | libm.so.6 | libmvec.so.1 | \
    libpthread.so.0 | libdl.so.2 | librt.so.1 | libresolv.so.2 | libutil.so.1 | libanl.so.1 | \
    libstdc++.so.6 | libgcc_s.so.1)
    return 0
    ;;
  esac
  return 1
}

# Every ELF under DIR/bin and DIR/lib resolves each library it needs inside DIR/lib or to the
# base set, with no LD_LIBRARY_PATH (RUNPATH alone). Prints each offence; returns 1 on any.
check_bundle_deps() {
  local dir bad=0 f line name path
  dir="$(cd "$1" && pwd -P)"
  for f in "$dir"/bin/* "$dir"/lib/*; do
    [[ -f $f && $(head -c 4 "$f" | od -An -c | tr -d ' ') == '177ELF' ]] || continue
    while IFS= read -r line; do
      name="$(awk '{print $1}' <<<"$line")"
      if [[ $line == *"not found"* ]]; then
        echo "bundle check: ${f#"$dir"/} needs $name: not found" >&2
        bad=1
        continue
      fi
      path="$(awk '$2 == "=>" {print $3}' <<<"$line")"
      [[ -z $path ]] && continue # the loader or the vDSO
      path="$(realpath -m "$path")"
      [[ $path == "$dir"/lib/* ]] && continue
      if ! is_base_lib "$name"; then
        echo "bundle check: ${f#"$dir"/} needs $name from $path, outside the bundle" >&2
        bad=1
      fi
    done < <(env -i PATH=/usr/bin:/bin ldd "$f" 2>&1)
  done
  return $bad
}
