package restateserver

import (
	"errors"
	"os"
)

// BinaryEnv names the variable holding the restate-server path; the
// Makefile exports it.
const BinaryEnv = "RESTATE_SERVER_BIN"

// binaryFromEnv returns the restate-server path from RESTATE_SERVER_BIN, or
// why it cannot be used: unset, missing, or not an executable file.
func binaryFromEnv() (string, error) {
	path := os.Getenv(BinaryEnv)
	if path == "" {
		return "", errors.New(BinaryEnv + " is not set")
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", errors.New(BinaryEnv + "=" + path + ": " + err.Error())
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", errors.New(BinaryEnv + "=" + path + " is not an executable file")
	}
	return path, nil
}
