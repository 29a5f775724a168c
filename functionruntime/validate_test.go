package functionruntime

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// "fatal_error is bounded diagnostic text, not logs": truncation keeps valid
// UTF-8, whole runes, the bound, and marks the cut.
func TestTruncateUTF8(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"short text is unchanged", "boom", 10, "boom"},
		{"exactly at the bound", "abcd", 4, "abcd"},
		{"cut marks the truncation", "abcdefgh", 6, "abc…"},
		{"cut never splits a rune", "ééééé", 6, "é…"},
		{"invalid bytes become U+FFFD", "a\xffb", 10, "a\uFFFDb"},
		{"bound below the marker", "abcdef", 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncateUTF8(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("truncateUTF8(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if len(got) > tt.max || !utf8.ValidString(got) {
				t.Errorf("result %q breaks the bound or UTF-8", got)
			}
		})
	}
}

func validRegisterRequest() *executorv1.RegisterFunctionRequest {
	return &executorv1.RegisterFunctionRequest{
		RunUid:              "2b5d0e8e-9a4c-4b7e-8f1a-0c2d3e4f5a6b",
		RegistrationAttempt: 1,
		WorkingDir:          "/workspace/runs/2b5d",
		Handler:             "handler.handle",
		Env:                 map[string]string{"A": "1"},
		IdleTimeoutSeconds:  300,
		RegistrationDigest:  "sha256:" + strings.Repeat("0a", 32),
	}
}

// FuzzValidateRegister drives the handler-independent validation (run_uid,
// env names and sizes, digest, attempt, idle timeout) with arbitrary input.
// It must never panic, must reject only with InvalidArgument, and whatever
// it accepts must be well-formed by the documented rules.
func FuzzValidateRegister(f *testing.F) {
	f.Add("2b5d...", int32(1), "GREETING", "hello", int64(300), "sha256:"+strings.Repeat("ab", 32))
	f.Add("", int32(0), "", "", int64(-1), "")
	f.Add("a/b", int32(1), "1X", "v", int64(0), "sha256:"+strings.Repeat("AB", 32))
	f.Add("run", int32(2), "FNBRIDGE_X", "v\x00", int64(604801), "sha256:"+strings.Repeat("a", 63))
	f.Add("r\xff", int32(1), "_ok", "\xff", int64(1), "sha256:"+strings.Repeat("a", 65))
	f.Fuzz(func(t *testing.T, uid string, attempt int32, envName, envValue string, idle int64, dig string) {
		req := validRegisterRequest()
		req.RunUid = uid
		req.RegistrationAttempt = attempt
		req.Env = map[string]string{envName: envValue}
		req.IdleTimeoutSeconds = idle
		req.RegistrationDigest = dig
		lim := DefaultLimits()
		p, err := validateRegister(req, lim)
		if err != nil {
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.InvalidArgument {
				t.Fatalf("rejection is not InvalidArgument: %v", err)
			}
			if !utf8.ValidString(st.Message()) || len(st.Message()) > maxStatusMessageBytes {
				t.Fatalf("message not bounded valid UTF-8: %q", st.Message())
			}
			return
		}
		// Accepted ⇒ well-formed.
		if p.runUID != uid || len(uid) == 0 || len(uid) > MaxRunUIDBytes || !isASCIIAlnum(uid[0]) {
			t.Fatalf("accepted run_uid %q", uid)
		}
		for i := 0; i < len(uid); i++ {
			if c := uid[i]; !isASCIIAlnum(c) && c != '.' && c != '_' && c != '-' {
				t.Fatalf("accepted run_uid %q with byte %q", uid, c)
			}
		}
		if attempt < 1 {
			t.Fatalf("accepted attempt %d", attempt)
		}
		if idle < 0 || idle > int64(lim.MaxIdleTimeout.Seconds()) {
			t.Fatalf("accepted idle timeout %d", idle)
		}
		if len(dig) != 71 || !strings.HasPrefix(dig, "sha256:") || strings.Trim(dig[7:], "0123456789abcdef") != "" {
			t.Fatalf("accepted digest %q", dig)
		}
		if envName == "" || envName[0] >= '0' && envName[0] <= '9' || strings.Trim(envName, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			t.Fatalf("accepted env name %q", envName)
		}
		if strings.HasPrefix(strings.ToUpper(envName), ReservedEnvPrefix) {
			t.Fatalf("accepted reserved env name %q", envName)
		}
		if strings.ContainsRune(envValue, 0) || !utf8.ValidString(envValue) || len(envName)+len(envValue)+2 > lim.MaxEnvBytes {
			t.Fatalf("accepted env value %q", envValue)
		}
	})
}

// FuzzCheckOutputs: outputs accepted by the bounds check are within every
// documented bound.
func FuzzCheckOutputs(f *testing.F) {
	f.Add("status", "ok", "exit_code", "0")
	f.Add("", "", "1x", "\xff")
	f.Add(strings.Repeat("k", 64), strings.Repeat("v", 5000), "a.b-c", "é")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		lim := DefaultLimits().Outputs
		out := map[string]string{k1: v1, k2: v2}
		if err := checkOutputs(out, lim); err != nil {
			return
		}
		total := 0
		for k, v := range out {
			if k == "" || len(k) > lim.MaxKeyBytes || strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
				t.Fatalf("accepted key %q", k)
			}
			if k[0] >= '0' && k[0] <= '9' || k[0] == '.' || k[0] == '-' {
				t.Fatalf("accepted key %q", k)
			}
			if len(v) > lim.MaxValueBytes || !utf8.ValidString(v) {
				t.Fatalf("accepted value %q", v)
			}
			total += len(k) + len(v)
		}
		if total > lim.MaxTotalBytes {
			t.Fatalf("accepted %d bytes", total)
		}
	})
}
