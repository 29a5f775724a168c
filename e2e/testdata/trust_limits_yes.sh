# flood writes stdout without end; only file_size (or the timeout) stops it.
flood() { yes; }

# orphan leaves one grandchild that calls setsid and exits at once.
orphan() { ( setsid sh -c 'exit 0' & ); echo '{}'; }
