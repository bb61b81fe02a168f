package triton

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/fleetscribe/fleetscribe/modelspec"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// The diarization model (modelspec.DiarizeName): who speaks when, a
// recording's chunks in order, its state carried by the requests (see
// modelspec's diarize.go). Served by the same partitions as the speech
// model, through the same pool: dispatch, backpressure, retries on other
// partitions and poison detection mean what they mean for transcription.

// DiarizeRequest is one chunk of a recording, or its finish.
type DiarizeRequest struct {
	Samples []float32 // 16 kHz mono; empty only with Finish
	State   []byte    // the previous response's State; nil at the first chunk
	// Finish asks for the final label of every provisional speaker, within
	// the hints (0: none). With Samples, they are the recording's last
	// chunk: heard, then finished, the labels with its turns. That is one
	// request to a model whose metadata lists the input last
	// (modelspec.LastInput), and the chunk then a finish request to one
	// of an earlier release.
	Finish                   bool
	MinSpeakers, MaxSpeakers int
	Priority                 uint64        // Triton request priority (0: the pool's)
	QueueTimeout             time.Duration // Triton queue timeout (0: the pool's)
}

// DiarizeTurn is a provisional speaker talking, in seconds into the chunk.
type DiarizeTurn struct {
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	Speaker int     `json:"speaker"`
}

// DiarizeResult is the model's answer: the chunk's turns, the state for
// the next request, and with Finish each provisional speaker's final label
// (-1: never heard).
type DiarizeResult struct {
	Turns  []DiarizeTurn
	State  []byte
	Labels []int
}

// Diarize sends r to the diarization model (ModelIO.DiarizeModel).
func (c *Client) Diarize(ctx context.Context, r DiarizeRequest) (DiarizeResult, error) {
	if r.Finish && len(r.Samples) > 0 && !c.diarizeHearsLast(ctx) {
		chunk := r
		chunk.Finish = false
		res, err := c.diarize(ctx, chunk)
		if err != nil {
			return DiarizeResult{}, err
		}
		fin := r
		fin.Samples, fin.State = nil, res.State
		end, err := c.diarize(ctx, fin)
		if err != nil {
			return DiarizeResult{}, err
		}
		res.State, res.Labels = end.State, end.Labels
		return res, nil
	}
	return c.diarize(ctx, r)
}

// The states of Client.hearsLast.
const (
	diarizeLastUnknown = iota
	diarizeLastListed
	diarizeLastAbsent
)

// diarizeHearsLast reports whether the server's diarization model lists
// the input last, asking its metadata once; a failed call answers no (a
// last chunk then goes as two requests, which every release serves) and
// is asked again next time.
func (c *Client) diarizeHearsLast(ctx context.Context) bool {
	switch c.hearsLast.Load() {
	case diarizeLastListed:
		return true
	case diarizeLastAbsent:
		return false
	}
	md, err := c.rpc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: c.io.DiarizeModel})
	if err != nil {
		return false
	}
	for _, in := range md.GetInputs() {
		if in.GetName() == modelspec.LastInput {
			c.hearsLast.Store(diarizeLastListed)
			return true
		}
	}
	c.hearsLast.Store(diarizeLastAbsent)
	return false
}

// diarize sends one request. A chunk's audio goes through the client's
// shared memory region where it has one and a slot is free, as a
// transcription request's does (the same region: the speech and diarize
// models are served by one Triton process), else in the request.
func (c *Client) diarize(ctx context.Context, r DiarizeRequest) (DiarizeResult, error) {
	call := func(req *pb.ModelInferRequest) (DiarizeResult, error) { return c.diarizeCall(ctx, req) }
	if len(r.Samples) > 0 { // (a finish request has no audio)
		res, sent, err := viaSharedMemory(ctx, c, r.Samples, func() *pb.ModelInferRequest { return c.io.newDiarizeRequest(r, false) }, call)
		if sent {
			return res, err
		}
	}
	return call(c.io.newDiarizeRequest(r, true))
}

func (c *Client) diarizeCall(ctx context.Context, req *pb.ModelInferRequest) (DiarizeResult, error) {
	var p peer.Peer
	resp, err := c.rpc.ModelInfer(ctx, req, grpc.Peer(&p))
	if err != nil {
		if unknownRegion(err) {
			return DiarizeResult{}, err // for viaSharedMemory: diarize sends it again
		}
		return DiarizeResult{}, classify("model infer "+req.ModelName, err, &p)
	}
	return parseDiarizeResponse(resp)
}

// newDiarizeRequest builds r's request; with inline false its audio is
// the first input, without contents, for sharedMemory.inShm to place (as
// newRequest's).
func (m ModelIO) newDiarizeRequest(r DiarizeRequest, inline bool) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: m.DiarizeModel}
	n := len(r.Samples) // a finish request has no audio: the input is left out
	audio := &pb.ModelInferRequest_InferInputTensor{Name: modelspec.AudioInput, Datatype: TypeFP32, Shape: m.shape(int64(n))}
	if n > 0 && !inline {
		req.Inputs = append(req.Inputs, audio)
	}
	req.Inputs = append(req.Inputs,
		&pb.ModelInferRequest_InferInputTensor{Name: modelspec.StateInput, Datatype: TypeBytes, Shape: m.shape(1)},
		&pb.ModelInferRequest_InferInputTensor{Name: modelspec.FinishInput, Datatype: TypeBool, Shape: m.shape(1)},
		&pb.ModelInferRequest_InferInputTensor{Name: modelspec.SpeakersInput, Datatype: TypeInt32, Shape: m.shape(2)})
	req.RawInputContents = [][]byte{EncodeBytes(r.State), EncodeBool(r.Finish && n == 0), EncodeInt32(int32(r.MinSpeakers), int32(r.MaxSpeakers))}
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{
		{Name: modelspec.TurnsOutput}, {Name: modelspec.StateOutput}, {Name: modelspec.LabelsOutput},
	}
	if r.Finish && n > 0 {
		// The recording's last chunk (sent so only where the model lists
		// the input: Client.Diarize).
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: modelspec.LastInput, Datatype: TypeBool, Shape: m.shape(1)})
		req.RawInputContents = append(req.RawInputContents, EncodeBool(true))
	}
	if n > 0 && inline {
		raw := make([]byte, 4*n)
		encodeFP32Into(raw, r.Samples)
		req.Inputs = append(req.Inputs, audio)
		req.RawInputContents = append(req.RawInputContents, raw)
	}
	req.Parameters = queueParameters(r.Priority, r.QueueTimeout)
	return req
}

func parseDiarizeResponse(resp *pb.ModelInferResponse) (DiarizeResult, error) {
	var res DiarizeResult
	turns, ok, err := outputBytes(resp, modelspec.TurnsOutput)
	if err != nil || !ok {
		return res, fmt.Errorf("%w: no %q output (%w)", ErrBadResponse, modelspec.TurnsOutput, err)
	}
	for i, t := range turns {
		if len(t) == 0 {
			continue
		}
		var turn DiarizeTurn
		if err := json.Unmarshal(t, &turn); err != nil {
			return DiarizeResult{}, fmt.Errorf("%w: turn %d: %w", ErrBadResponse, i, err)
		}
		if turn.End < turn.Start || turn.Speaker < 0 {
			return DiarizeResult{}, fmt.Errorf("%w: turn %d: %+v", ErrBadResponse, i, turn)
		}
		res.Turns = append(res.Turns, turn)
	}
	state, ok, err := outputBytes(resp, modelspec.StateOutput)
	if err != nil || !ok || len(state) != 1 {
		return DiarizeResult{}, fmt.Errorf("%w: want one %q element (%w)", ErrBadResponse, modelspec.StateOutput, err)
	}
	res.State = state[0]
	labels, err := outputInt32(resp, modelspec.LabelsOutput)
	if err != nil {
		return DiarizeResult{}, err
	}
	for _, l := range labels {
		res.Labels = append(res.Labels, int(l))
	}
	return res, nil
}

// outputInt32 returns the named INT32 output's values (none when absent).
func outputInt32(resp *pb.ModelInferResponse, name string) ([]int32, error) {
	for i, out := range resp.GetOutputs() {
		if out.GetName() != name {
			continue
		}
		if out.GetDatatype() != TypeInt32 {
			return nil, fmt.Errorf("%w: output %q has datatype %s, want INT32", ErrBadResponse, name, out.GetDatatype())
		}
		if i < len(resp.GetRawOutputContents()) {
			raw := resp.GetRawOutputContents()[i]
			if len(raw)%4 != 0 {
				return nil, fmt.Errorf("%w: output %q of %d bytes", ErrBadResponse, name, len(raw))
			}
			vals := make([]int32, len(raw)/4)
			for k := range vals {
				vals[k] = int32(uint32(raw[4*k]) | uint32(raw[4*k+1])<<8 | uint32(raw[4*k+2])<<16 | uint32(raw[4*k+3])<<24)
			}
			return vals, nil
		}
		return out.GetContents().GetIntContents(), nil
	}
	return nil, nil
}

// Diarize runs one diarization request through the pool, as Transcribe
// runs a transcription: ErrRejected when the model refused the request
// (a bad state or hints), ErrPoisonInput when it failed it the same way on
// two partitions that serve other inputs.
func (p *Pool) Diarize(ctx context.Context, req DiarizeRequest) (DiarizeResult, error) {
	p.queueDefaults(&req.Priority, &req.QueueTimeout)
	var res DiarizeResult
	input := Request{Samples: req.Samples, Model: p.parts[0].client.io.DiarizeModel}
	err := p.call(ctx, input, false, func(ctx context.Context, c *Client) error {
		var err error
		res, err = c.Diarize(ctx, req)
		return err
	})
	return res, err
}
