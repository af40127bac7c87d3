package schedule

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                                   "redis://127.0.0.1:6379/0",
		"redis://user:s3cret@10.0.0.1:6379":                          "redis://user:xxxxx@10.0.0.1:6379",
		"redis://sentinel:26379?master_name=mymaster":                "redis://sentinel:26379?master_name=mymaster",
		"redis://sentinel:26379?master_name=m&password=s3cret":       "redis://sentinel:26379?master_name=m&password=xxxxx",
		"rediss://a:7000?addr=b:7000&sentinel_password=s3cret":       "rediss://a:7000?addr=b%3A7000&sentinel_password=xxxxx",
		"redis://:s3cret@node1:7000?addr=node2:7000&addr=node3:7000": "redis://:xxxxx@node1:7000?addr=node2:7000&addr=node3:7000",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
