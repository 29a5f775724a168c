package proc

import (
	"fmt"
	"sort"
	"strings"
)

// DefaultPath is the PATH a worker gets unless its registration sets one.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// DefaultLang is the LANG a worker gets unless its registration sets one:
// a UTF-8 locale present on every glibc system.
const DefaultLang = "C.UTF-8"

// BuildEnv assembles a worker's complete environment. It starts from the
// minimal base (PATH=[DefaultPath], LANG=[DefaultLang], HOME=home), lets the
// registration's variables override it, and finally applies the adapter's
// own variables (owned), which the registration cannot override. Nothing
// comes from the server's environment.
func BuildEnv(home string, registration, owned map[string]string) ([]string, error) {
	env := map[string]string{"PATH": DefaultPath, "LANG": DefaultLang, "HOME": home}
	for k, v := range registration {
		if err := checkEnvVar(k, v); err != nil {
			return nil, err
		}
		env[k] = v
	}
	for k, v := range owned {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func checkEnvVar(k, v string) error {
	switch {
	case k == "":
		return fmt.Errorf("env: empty variable name")
	case strings.ContainsAny(k, "=\x00"):
		return fmt.Errorf("env: variable name %q contains '=' or NUL", k)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("env: value of %s contains a NUL byte", k)
	}
	return nil
}
