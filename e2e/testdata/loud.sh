# 3 MB on stderr, in one line, then a normal result.
shout() { head -c 3000000 /dev/zero | tr '\0' x >&2; echo >&2; echo '{"ok":true}'; }
