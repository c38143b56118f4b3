package tensorhub_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"tensorhub.dev/tensorhub"
)

// The README's quickstart; TestReadmeQuickstartIsTheExample keeps them equal.
func Example() {
	server, err := tensorhub.NewServer("tcp://127.0.0.1:0") // or connect to a remote one
	check(err)
	defer server.Close()
	trainer, err := tensorhub.Connect(server.URL())
	check(err)
	defer trainer.Close()
	reader, err := tensorhub.Connect(server.URL())
	check(err)
	defer reader.Close()

	// Publish: nothing is copied; the buffer is C memory the library may serve.
	weights := tensorhub.NewBuffer(1 << 20)
	defer weights.Close()
	copy(weights.Bytes(), "hello, weights")
	replica, err := trainer.Publish(tensorhub.PublishConfig{Model: "policy", Version: 1},
		[]tensorhub.Tensor{tensorhub.BytesTensor("w", weights)})
	check(err)
	defer replica.Close()

	// Fetch the newest version straight from the trainer's memory.
	dst := tensorhub.NewBuffer(1 << 20)
	defer dst.Close()
	version, _, err := reader.Fetch(context.Background(), "policy", tensorhub.Latest, 0,
		[]tensorhub.Tensor{tensorhub.BytesTensor("w", dst)}, false)
	check(err)
	fmt.Printf("version %d: %s\n", version, dst.Bytes()[:14])

	// Errors carry a status and the library's message.
	_, err = reader.Resolve("nope", tensorhub.Latest)
	fmt.Println(errors.Is(err, tensorhub.ErrNotFound))
	// Output:
	// version 1: hello, weights
	// true
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
