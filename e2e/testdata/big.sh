# 7 MB of stdout, over the 6 MiB output bound.
big() { head -c 7000000 /dev/zero | tr '\0' a; }
