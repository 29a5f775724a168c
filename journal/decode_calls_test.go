package journal

import (
	"testing"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"google.golang.org/protobuf/proto"
)

// The hand-written decoders must read what the generated code reads.
func TestCallDecodersMatchGeneratedCode(t *testing.T) {
	idem, scope := "idem-1", "sc"
	msgs := []proto.Message{
		&servicev1.SleepCommandMessage{},
		&servicev1.SleepCommandMessage{WakeUpTime: 1 << 41, ResultCompletionId: 300, Name: "nap ✓"},
		&servicev1.CallCommandMessage{},
		&servicev1.CallCommandMessage{ServiceName: "S", HandlerName: "h", Parameter: []byte{0, 0xff}, Key: "k",
			Headers: []*servicev1.Header{{Key: "a", Value: "b"}, {Key: "c"}}, IdempotencyKey: &idem, Scope: &scope, LimitKey: &idem,
			InvocationIdNotificationIdx: 2, ResultCompletionId: 3, Name: "c"},
		&servicev1.OneWayCallCommandMessage{},
		&servicev1.OneWayCallCommandMessage{ServiceName: "S", HandlerName: "h", Parameter: []byte("p"), InvokeTime: 1700000000000,
			Headers: []*servicev1.Header{{Key: "x", Value: "y"}}, Key: "k", IdempotencyKey: &idem, Scope: &scope, LimitKey: &scope,
			InvocationIdNotificationIdx: 9, Name: "s"},
	}
	for _, want := range msgs {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got proto.Message
		switch want.(type) {
		case *servicev1.SleepCommandMessage:
			got, err = decodeSleep(b)
		case *servicev1.CallCommandMessage:
			got, err = decodeCall(b)
		case *servicev1.OneWayCallCommandMessage:
			got, err = decodeOneWayCall(b)
		}
		if err != nil {
			t.Fatalf("decoding %v: %v", want, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, want %v", got, want)
		}
	}
	// Invalid UTF-8 in a string field is rejected, as the generated code does.
	bad := []byte{0x0a, 0x01, 0xff}
	if _, err := decodeCall(bad); err == nil {
		t.Fatal("decodeCall accepted a service name that is not UTF-8")
	}
	if _, err := decodeOneWayCall(bad); err == nil {
		t.Fatal("decodeOneWayCall accepted a service name that is not UTF-8")
	}
	if _, err := decodeSleep([]byte{0x62, 0x01, 0xff}); err == nil {
		t.Fatal("decodeSleep accepted a name that is not UTF-8")
	}
}
