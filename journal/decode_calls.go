package journal

import servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"

// Hand-written decoders for the replayed commands of durable steps
// (Sleep, Call, OneWayCall), following decode.go's rules.

func decodeSleep(b []byte) (*servicev1.SleepCommandMessage, error) {
	it := fieldIter{b: b}
	s := &servicev1.SleepCommandMessage{}
	for it.next() {
		switch it.num {
		case 1:
			s.WakeUpTime = it.varint()
		case 11:
			s.ResultCompletionId = uint32(it.varint())
		case 12:
			s.Name = it.string()
		default:
			it.skip()
		}
	}
	return s, it.err
}

func decodeCall(b []byte) (*servicev1.CallCommandMessage, error) {
	it := fieldIter{b: b}
	c := &servicev1.CallCommandMessage{}
	for it.next() {
		switch it.num {
		case 1:
			c.ServiceName = it.string()
		case 2:
			c.HandlerName = it.string()
		case 3:
			c.Parameter = it.copyBytes()
		case 4:
			h, err := decodeHeader(it.bytes())
			it.fail(err)
			c.Headers = append(c.Headers, h)
		case 5:
			c.Key = it.string()
		case 6:
			v := it.string()
			c.IdempotencyKey = &v
		case 7:
			v := it.string()
			c.Scope = &v
		case 8:
			v := it.string()
			c.LimitKey = &v
		case 10:
			c.InvocationIdNotificationIdx = uint32(it.varint())
		case 11:
			c.ResultCompletionId = uint32(it.varint())
		case 12:
			c.Name = it.string()
		default:
			it.skip()
		}
	}
	return c, it.err
}

func decodeOneWayCall(b []byte) (*servicev1.OneWayCallCommandMessage, error) {
	it := fieldIter{b: b}
	c := &servicev1.OneWayCallCommandMessage{}
	for it.next() {
		switch it.num {
		case 1:
			c.ServiceName = it.string()
		case 2:
			c.HandlerName = it.string()
		case 3:
			c.Parameter = it.copyBytes()
		case 4:
			c.InvokeTime = it.varint()
		case 5:
			h, err := decodeHeader(it.bytes())
			it.fail(err)
			c.Headers = append(c.Headers, h)
		case 6:
			c.Key = it.string()
		case 7:
			v := it.string()
			c.IdempotencyKey = &v
		case 8:
			v := it.string()
			c.Scope = &v
		case 9:
			v := it.string()
			c.LimitKey = &v
		case 10:
			c.InvocationIdNotificationIdx = uint32(it.varint())
		case 12:
			c.Name = it.string()
		default:
			it.skip()
		}
	}
	return c, it.err
}
