# 40 outputs, over the bound of 32.
many() { for i in $(seq 1 40); do echo "k$i=v" >>"$FNBRIDGE_OUTPUTS"; done; echo '{}'; }
