package modelspec

import "github.com/fleetscribe/fleetscribe/modelspec/configpb"

// The diarization model: a second model of the same repositories and
// partitions as the speech model, asked who speaks when. A recording's
// chunks go to it in order, each request carrying the state the previous
// response returned (the recording's speakers so far), so any partition
// serves any chunk and the partitions keep nothing between requests; the
// last request (finish) carries the state and the job's speaker hints and
// returns each provisional speaker's final label.
const (
	// DiarizeName is the diarization model's name in every repository.
	DiarizeName = "diarize"

	// Inputs: the chunk's audio (AudioInput, FP32 [n], 16 kHz mono; left
	// out of a finish request), the state (BYTES [1]; absent or empty at the first
	// chunk), finish (BOOL [1]), last (BOOL [1]: the audio is the
	// recording's last chunk, heard and then finished as with finish, so
	// the labels come with its turns: one request fewer a recording) and
	// the job's speaker hints (INT32 [2]: min, max; 0 none). A client
	// sends last only to a model whose metadata lists it (one of an
	// earlier release would refuse it).
	StateInput    = "state"
	FinishInput   = "finish"
	LastInput     = "last"
	SpeakersInput = "speakers"
	// Outputs: the chunk's turns (BYTES [turns], one JSON object a turn:
	// start and end in seconds into the chunk, speaker a provisional
	// index), the new state (BYTES [1]), and at finish each provisional
	// speaker's final label (INT32 [provisional]; -1: never heard).
	TurnsOutput  = "turns"
	StateOutput  = "state_out"
	LabelsOutput = "labels"

	// DiarizeMaxSpeakers is the most speakers the shipped CPU diarizer
	// (engine pyannote_campp) separates: a job's max above it is refused.
	DiarizeMaxSpeakers = 20

	// SortformerMaxSpeakers is the most speakers the GPU repository's
	// diarizer (engine sortformer, NeMo's streaming Sortformer 4spk-v2)
	// separates: workers of a GPU repository run with
	// -diarize-max-speakers 4.
	SortformerMaxSpeakers = 4
)

// DiarizeInputs are the diarization model's inputs.
func DiarizeInputs() []Tensor {
	return []Tensor{
		{Name: AudioInput, DataType: configpb.DataType_TYPE_FP32, Dims: []int{-1}, Ragged: true, Optional: true, Comment: "Left out of a finish request."},
		{Name: StateInput, DataType: configpb.DataType_TYPE_STRING, Dims: []int{1}, Optional: true},
		{Name: FinishInput, DataType: configpb.DataType_TYPE_BOOL, Dims: []int{1}, Optional: true},
		{Name: LastInput, DataType: configpb.DataType_TYPE_BOOL, Dims: []int{1}, Optional: true, Comment: "The audio is the recording's last chunk: heard, then finished."},
		{Name: SpeakersInput, DataType: configpb.DataType_TYPE_INT32, Dims: []int{2}, Optional: true, Comment: "The job's speaker hints (min, max; 0: none), read with finish or last."},
	}
}

// DiarizeOutputs are the diarization model's outputs.
func DiarizeOutputs() []Tensor {
	return []Tensor{
		{Name: TurnsOutput, DataType: configpb.DataType_TYPE_STRING, Dims: []int{-1}},
		{Name: StateOutput, DataType: configpb.DataType_TYPE_STRING, Dims: []int{1}},
		{Name: LabelsOutput, DataType: configpb.DataType_TYPE_INT32, Dims: []int{-1}},
	}
}
