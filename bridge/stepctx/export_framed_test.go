package stepctx

// FramedConns is how many framed connections s serves, for a test that
// waits until the server is done with one its client closed.
func (s *Server) FramedConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.framed)
}

// FramedBusy is how many framed connections are serving a request: 0
// once each has answered (or held the answer of) its last one.
func (s *Server) FramedBusy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for fc := range s.framed {
		fc.mu.Lock()
		if fc.busy {
			n++
		}
		fc.mu.Unlock()
	}
	return n
}
