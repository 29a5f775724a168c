# Lives outside the working directory; fn/escape.sh links here.
f() { echo '{"escaped":true}'; }
