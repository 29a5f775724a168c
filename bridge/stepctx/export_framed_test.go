package stepctx

// FramedConns is how many framed connections s serves, for a test that
// waits until the server is done with one its client closed.
func (s *Server) FramedConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.framed)
}
