f() { echo '{}'; }
