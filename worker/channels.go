package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/speakers"
	"github.com/fleetscribe/fleetscribe/subtitle"
)

// A job with channels "split" (a call recording, one party a channel) is
// transcribed a channel at a time, each read and decoded alone (the
// object streamed again for each: a short one is served from its first
// read), and each channel is its own speaker, ChannelLabel(i). Its words
// are put in one time order; a channel's turns are its runs of words.

// channelTurnGap joins a channel's words into one turn across pauses
// shorter than this.
const channelTurnGap = 1.0

// transcribeChannels transcribes every channel of the input alone and
// joins them into one transcript with a speaker a channel.
func (t *task) transcribeChannels(ctx context.Context) (contract.Transcript, error) {
	var parts []contract.Transcript
	for ch, n := 0, 1; ch < n; ch++ {
		s := t.streamed(ch)
		tr, _, err := t.w.transcribeStream(ctx, s, t.infer, t.opening)
		if err != nil {
			if errors.Is(err, audio.ErrNoSuchChannel) {
				return contract.Transcript{}, Permanent(contract.ClassUnsupported, err)
			}
			return contract.Transcript{}, err
		}
		if ch == 0 {
			n = s.channels
			if n > contract.MaxChannels {
				return contract.Transcript{}, Permanentf(contract.ClassUnsupported, "channels split of a recording of %d channels: at most %d", n, contract.MaxChannels)
			}
		}
		parts = append(parts, tr)
	}
	return joinChannels(parts), nil
}

// joinChannels is the transcript of a split job from its channels'.
func joinChannels(parts []contract.Transcript) contract.Transcript {
	tr := parts[0]
	tr.Schema = contract.TranscriptSchemaSpeakers
	var words [][]contract.Word
	var turns []contract.SpeakerTurn
	var texts []string
	tr.Chunks = 0
	for i, p := range parts {
		label := contract.ChannelLabel(i)
		for k := range p.Words {
			p.Words[k].Speaker = label
		}
		words = append(words, p.Words)
		turns = append(turns, speakers.ChannelTurns(p.Words, label, channelTurnGap)...)
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
		tr.Chunks += p.Chunks
		tr.DurationSec = max(tr.DurationSec, p.DurationSec)
	}
	tr.Words = speakers.MergeWords(words)
	if len(tr.Words) > 0 {
		names := make([]string, len(tr.Words))
		for i, w := range tr.Words {
			names[i] = w.Word
		}
		tr.Text = strings.Join(names, " ")
		tr.Segments = subtitle.BuildSegments(tr.Words)
	} else {
		// No word times: each channel's text in turn.
		tr.Text = strings.Join(texts, " ")
	}
	if tr.Segments == nil {
		tr.Segments = []contract.Segment{}
	}
	speakers.Sort(turns)
	tr.SpeakerTurns = turns
	if tr.SpeakerTurns == nil {
		tr.SpeakerTurns = []contract.SpeakerTurn{}
	}
	var overlap float64
	tr.Speakers, overlap = speakers.Summarize(tr.Words, turns)
	channel := map[string]int{}
	for i := range parts {
		channel[contract.ChannelLabel(i)] = i
	}
	for i := range tr.Speakers {
		ch := channel[tr.Speakers[i].Label]
		tr.Speakers[i].Channel = &ch
		delete(channel, tr.Speakers[i].Label)
	}
	for i := range parts {
		// A silent channel is still a party of the call.
		if _, silent := channel[contract.ChannelLabel(i)]; silent {
			tr.Speakers = append(tr.Speakers, contract.SpeakerSummary{Label: contract.ChannelLabel(i), Channel: &i})
		}
	}
	tr.Diarization = &contract.Diarization{Mode: contract.ModeChannels, OverlapSeconds: overlap}
	return tr
}
