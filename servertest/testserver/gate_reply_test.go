package testserver

import "testing"

// A store's reading of the server's clock (TIME) once waited at a held gate
// in place of the decision a test meant to hold (the nearcache overtaken
// denial test, in CI under load); and once, read in one piece with the
// decision's reply, let that pass (valkey-go pipelines them on one
// connection: the test of a lost reply waited for a held one forever).
func TestGateHoldsOnlyDecisionReplies(t *testing.T) {
	for reply, want := range map[string]bool{
		"$40\r\n0123456789":                           true,  // one request's, packed
		"*10\r\n:1\r\n:5\r\n":                         true,  // several's
		"*2\r\n$10\r\n1764290000\r\n$6\r\n123456\r\n": false, // TIME
		"%7\r\n$6\r\nserver\r\n":                      false, // a handshake
		"+PONG\r\n":                                   false,
		"-ERR no\r\n":                                 false,
		// read together with a decision's (a pipelining client), either first
		"*2\r\n$10\r\n1764290000\r\n$6\r\n123456\r\n$40\r\n0123":     true,
		"$5\r\nabcde\r\n*2\r\n$10\r\n1764290000\r\n$6\r\n123456\r\n": true,
		"*2\r\n$10\r\n1764290000\r\n$6\r\n123456\r\n*3\r\n:1\r\n":    true,
		"*2\r\n$10\r\n1764290000\r\n$6\r\n123456\r\n+OK\r\n":         false,
		"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n$40\r\n01":             true,
	} {
		if got := decisionReply([]byte(reply)); got != want {
			t.Errorf("decisionReply(%q) = %v, want %v", reply, got, want)
		}
	}
}
