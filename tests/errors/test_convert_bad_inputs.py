"""Bad input to the GluonNLP 0.10 conversion (gluon_attention.convert), in the style of
test_bad_inputs.py: (what is wrong, call, exception type, message fragments). Each call raises
exactly that type, says ``Received:``, holds every fragment, and writes nothing."""
import os
import pickle
import shutil
import zipfile

import mxnet as mx
import pytest

import gluonnlp_peer as peer
from gluon_attention.convert import encoder_config, from_gluonnlp
from gluon_attention.convert.vocab import read_vocab, write_tokenizer
from gluon_attention.models.heads import head_block
from gluon_attention.models.torch_bin import load_torch_bin
from refusal import assert_refusal

SIZES = peer.sizes_of('bert_12_768_12')
V = len(peer.tiny_vocab())


def _resave(src, dst, edit):
    with peer.legacy():
        params = mx.nd.load(src)
        edit(params)
        mx.nd.save(dst, params)


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """A folder with a small 0.10 BERT (bert.params), RoBERTa (roberta.params), SQuAD model
    (squad.params) and their vocabulary (tiny.vocab), plus edited copies."""
    folder = tmp_path_factory.mktemp('gluonnlp')
    vocab = peer.tiny_vocab()
    (folder / 'tiny.vocab').write_text(vocab.to_json(), encoding='utf-8')
    bigger = peer.nlp.vocab.BERTVocab(peer.nlp.data.count_tokens(peer.WORDS + ['extra']))
    (folder / 'bigger.vocab').write_text(bigger.to_json(), encoding='utf-8')
    inputs = peer.batch(__import__('numpy').random.RandomState(0), V)
    for name, model, net in (('bert', 'bert_12_768_12', peer.backbone('bert_12_768_12', V)),
                             ('roberta', 'roberta_12_768_12',
                              peer.backbone('roberta_12_768_12', V)),
                             ('squad', 'bert_12_768_12',
                              peer.SquadModel(peer.backbone('bert_12_768_12', V)))):
        peer.randomize(net, 0, lambda n=net, m=model: peer.call(n, m, *inputs))
        peer.save(net, folder / (name + '.params'))
    _resave(str(folder / 'bert.params'), str(folder / 'extra.params'),
            lambda p: p.update({'foo.weight': mx.nd.zeros((2,))}))
    _resave(str(folder / 'squad.params'), str(folder / 'wide_head.params'),
            lambda p: p.update({'span_classifier.weight': mx.nd.zeros((3, 16))}))
    (folder / 'text.params').write_text('not a params file')
    (folder / 'plain.json').write_text('{"tokens": ["a"]}')
    (folder / 'repeated.txt').write_text('[UNK]\na\nb\na\n')
    (folder / 'no_unk.txt').write_text('a\nb\n')
    (folder / 'not_zip.bin').write_bytes(b'\x80\x02}q\x00.')        # the pre-1.6 form
    with zipfile.ZipFile(folder / 'foreign.bin', 'w') as archive:       # names os.system
        archive.writestr('archive/data.pkl', pickle.dumps({'w': os.system}, protocol=2))
    (folder / 'merges.txt').write_text('#version: 0.2\nc a\n', encoding='utf-8')
    (folder / 'bad_merges.txt').write_text('c a t\n', encoding='utf-8')
    (folder / 'head_kind').mkdir()
    (folder / 'head_kind' / 'head_config.json').write_text('{"kind": "pooled", "units": 4}')
    (folder / 'head_kind' / 'head.safetensors').write_bytes(b'')
    return folder


def _convert(params, model='bert_12_768_12', vocab='tiny.vocab', sizes=SIZES, merges=None):
    return lambda: from_gluonnlp(params, model, vocab, 'out', sizes=sizes, merges_file=merges)


BAD = [
    ('unknown-model', _convert('bert.params', model='bert_99'), ValueError,
     ["model_name='bert_99'", 'bert_12_768_12']),
    ('zoo-size-for-a-small-file', _convert('bert.params', sizes=None), ValueError,
     ["missing: ['encoder.transformer_cells.10."]),
    ('other-width', _convert('bert.params', sizes=dict(SIZES, units=32)), ValueError,
     ['word_embed.0.weight must have shape ({}, 32)'.format(V),
      'word_embed.0.weight.shape=({}, 16)'.format(V)]),
    ('roberta-file-as-bert', _convert('roberta.params'), ValueError,
     ["missing: ['token_type_embed.0.weight']"]),
    ('bert-file-as-roberta', _convert('bert.params', model='roberta_12_768_12'), ValueError,
     ["unknown: ['token_type_embed.0.weight']"]),
    ('vocabulary-size', _convert('bert.params', vocab='bigger.vocab'), ValueError,
     ['word_embed.0.weight ({} rows)'.format(V), 'vocabulary size={}'.format(V + 1)]),
    ('unknown-name', _convert('extra.params'), ValueError, ["unknown: ['foo.weight']"]),
    ('head-shape', _convert('wide_head.params'), ValueError,
     ['span_classifier.weight must have shape (2, 16)', 'span_classifier.weight.shape=(3, 16)']),
    ('not-a-params-file', _convert('text.params'), ValueError,
     ["params_file='text.params'"]),
    ('missing-params-file', _convert('none.params'), FileNotFoundError,
     ["params_file='none.params'"]),
    ('merges-for-bert', _convert('bert.params', merges='merges.txt'), ValueError,
     ['merges_file is for RoBERTa models only', "model_name='bert_12_768_12'"]),
    ('merges-outside-the-vocabulary', _convert('roberta.params', model='roberta_12_768_12',
                                               merges='merges.txt'), ValueError,
     ['every merge and its result must be tokens of the vocabulary', "merges=['c a']"]),
    ('merges-line-of-three', _convert('roberta.params', model='roberta_12_768_12',
                                      merges='bad_merges.txt'), ValueError,
     ['two tokens separated by a space', "merges_file line 1='c a t'"]),
    ('missing-merges-file', _convert('roberta.params', model='roberta_12_768_12',
                                     merges='none.txt'), FileNotFoundError,
     ["merges_file='none.txt'"]),
    ('heads-not-dividing-units', _convert('bert.params', sizes=dict(SIZES, num_heads=5)),
     ValueError, ['num_heads must divide units', 'num_heads=5, units=16']),
    ('heads-not-dividing-zoo-units', lambda: encoder_config('bert_12_768_12', 5,
                                                            {'units': 32}), ValueError,
     ['num_heads=12, units=32']),
    ('unknown-size-key', lambda: encoder_config('bert_12_768_12', 5, {'layers': 2}),
     ValueError, ["sizes=['layers']"]),
    ('size-zero', lambda: encoder_config('bert_12_768_12', 5, {'units': 0}), ValueError,
     ["sizes['units'] must be a positive integer", "sizes['units']=0"]),
    ('size-text', lambda: encoder_config('bert_12_768_12', 5, {'num_layers': '2'}), ValueError,
     ["sizes['num_layers']='2'"]),
    ('json-vocabulary-without-idx_to_token', lambda: read_vocab('plain.json'), ValueError,
     ['idx_to_token', "vocab_file='plain.json'"]),
    ('repeated-token', lambda: read_vocab('repeated.txt'), ValueError, ["repeated=['a']"]),
    ('vocabulary-without-unknown-token',
     lambda: write_tokenizer(read_vocab('no_unk.txt'), 'out'), ValueError,
     ['unknown token', 'unknown_token=None']),
    ('unknown-head-kind', lambda: head_block('head_kind'), ValueError, ["kind='pooled'"]),
    ('torch-bin-not-a-zip', lambda: load_torch_bin('not_zip.bin'), ValueError,
     ['saved by torch.save', "path='not_zip.bin'"]),
    ('torch-bin-foreign-class', lambda: load_torch_bin('foreign.bin'), ValueError,
     ['a state dict holds no', 'system', "path='foreign.bin'"]),
]


@pytest.mark.parametrize('call,kind,fragments', [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_conversion_raises_with_received_and_writes_nothing(call, kind, fragments, files,
                                                                 monkeypatch):
    monkeypatch.chdir(files)
    shutil.rmtree(files / 'out', ignore_errors=True)
    with pytest.raises(Exception) as err:
        call()
    assert_refusal(err.value, kind, fragments)
    assert not (files / 'out').exists()


def test_the_neighbour_of_the_bad_inputs_converts(files, monkeypatch):
    monkeypatch.chdir(files)
    result = _convert('squad.params')()
    assert result['head'] == 'span' and result['tokenizer']
    assert sorted(p.name for p in (files / 'out').iterdir()) == [
        'config.json', 'head.safetensors', 'head_config.json', 'model.safetensors',
        'tokenizer.json', 'tokenizer_config.json', 'vocab.txt']


def _command(*args):
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    return subprocess.run([sys.executable, '-m', 'gluon_attention', 'convert', *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_command_converts_and_refuses(files, tmp_path, capsys):
    sizes = ','.join('{}={}'.format(k, v) for k, v in SIZES.items())
    common = ['--from', 'gluonnlp', '--model', 'bert_12_768_12', '--vocab',
              str(files / 'tiny.vocab'), '--sizes', sizes, '--cased']
    done = _command(*common, '--params', str(files / 'squad.params'), '--output-dir',
                    str(tmp_path / 'ok'))
    assert done.returncode == 0, done.stderr
    assert 'wrote {}: encoder, span head, tokenizer\n'.format(tmp_path / 'ok') in done.stdout
    assert '"do_lower_case": false' in (tmp_path / 'ok' / 'tokenizer_config.json').read_text()
    umask = os.umask(0o22)
    os.umask(umask)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / 'ok').iterdir()}
    assert set(modes.values()) == {oct(0o666 & ~umask)}, modes      # as open() makes them
    from gluon_attention.__main__ import main  # pylint: disable=import-outside-toplevel
    assert main(['convert', *common, '--params', str(files / 'roberta.params'), '--output-dir',
                 str(tmp_path / 'no')]) == 2
    err = capsys.readouterr().err
    assert "missing: ['token_type_embed.0.weight']" in err and 'in sizes' in err
    assert '--sizes num_layers=4,units=256' in err and err.endswith('\n')
    assert not (tmp_path / 'no').exists()
    heads = common[:-3] + ['--sizes', sizes.replace('num_heads=2', 'num_heads=5'), '--cased']
    assert main(['convert', *heads, '--params', str(files / 'bert.params'), '--output-dir',
                 str(tmp_path / 'no')]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: num_heads must divide units') and err.endswith('units=16\n')


@pytest.mark.parametrize('sizes, item', [('units', 'units'), ('units=abc', 'units=abc'),
                                         ('layers=2', 'layers=2'), ('units=0', 'units=0'),
                                         ('units=16,units=8', 'units=8')])
def test_command_sizes_say_what_was_expected_and_received(sizes, item, capsys):
    from gluon_attention.__main__ import main  # pylint: disable=import-outside-toplevel
    with pytest.raises(SystemExit) as stop:
        main(['convert', '--from', 'gluonnlp', '--model', 'bert_12_768_12', '--params', 'p',
              '--vocab', 'v', '--output-dir', 'out', '--sizes', sizes])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert 'argument --sizes: expected comma-separated KEY=N with KEY one of num_layers, ' \
           'units, hidden_size, num_heads, max_length' in err
    assert "{!r} is not. Received: --sizes={!r}".format(item, sizes) in err
