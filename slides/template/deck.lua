-- deck.lua: pandoc filter that turns a dtlabs deck (Markdown that reads on GitHub) into
-- one frame per slide. See slides/README.md, "Rendering".
--
-- A deck opens with "# Lab NN — topic" and separates slides with "---"; its other slides
-- start with "##". At --slide-level=2 pandoc would give the "#" heading a title frame of
-- its own, so the first slide would become two pages. Demoting it keeps one page per
-- slide, which the rendering test counts on.
--
-- The decks are denser than a projector slide. For Beamer every frame gets the "shrink"
-- option: a frame whose content is taller than the page is scaled down to fit, and one
-- that fits is left as it is.
function Header(h)
  if h.level == 1 then
    h.level = 2
  end
  if h.level == 2 and FORMAT == "beamer" then
    h.classes:insert("shrink")
  end
  return h
end

-- A pipe table whose source lines are long gets equal column widths from pandoc (its
-- "| --- |" rules are all alike), so a column of file names is as wide as a column of
-- sentences and the table grows tall. Here the widths follow the text instead: each
-- column's share of the line is proportional to its longest cell, but never less than
-- its longest word (a file name cannot wrap); columns held at that minimum leave the
-- rest of the line to the others. A table that fits on one line keeps its natural
-- widths. Widths are counted in characters of the 10 pt sans font.
local kLine = 84        -- characters across a 16:9 frame at 10 pt
local kCodeWidth = 1.15 -- a monospace character in widths of a proportional one
local kPadding = 3      -- the space between two columns

local function words_of(text, scale, longest)
  for w in text:gmatch("%S+") do longest = math.max(longest, scale * (utf8.len(w) or #w)) end
  return longest
end

local function lengths(cell)
  local text = pandoc.utils.stringify(cell.contents)
  local length, word = utf8.len(text) or #text, words_of(text, 1, 0)
  pandoc.walk_block(pandoc.Div(cell.contents), {
    Code = function(code)
      length = length + (kCodeWidth - 1) * (utf8.len(code.text) or #code.text)
      word = words_of(code.text, kCodeWidth, word)
    end
  })
  return length, word
end

function Table(tbl)
  local n = #tbl.colspecs
  local want, need = {}, {}
  for i = 1, n do want[i], need[i] = 0, 0 end
  local function measure(rows)
    for _, row in ipairs(rows) do
      for i, c in ipairs(row.cells) do
        if i <= n then
          local l, w = lengths(c)
          want[i], need[i] = math.max(want[i], l + kPadding), math.max(need[i], w + kPadding)
        end
      end
    end
  end
  measure(tbl.head.rows)
  for _, body in ipairs(tbl.bodies) do measure(body.body) end
  local total = 0
  for i = 1, n do total = total + want[i] end
  if total <= kLine then
    for i, spec in ipairs(tbl.colspecs) do tbl.colspecs[i] = {spec[1], pandoc.ColWidthDefault} end
    return tbl
  end
  -- Share the line by want[], holding at need[] every column that would get less.
  local width, held = {}, {}
  repeat
    local left, wanted = kLine, 0
    for i = 1, n do
      if held[i] then left = left - need[i] else wanted = wanted + want[i] end
    end
    local changed = false
    for i = 1, n do
      if held[i] then
        width[i] = need[i]
      else
        width[i] = math.max(0, left) * want[i] / math.max(1, wanted)
        if width[i] < need[i] then held[i], changed = true, true end
      end
    end
  until not changed
  local sum = 0
  for i = 1, n do sum = sum + width[i] end
  for i, spec in ipairs(tbl.colspecs) do
    tbl.colspecs[i] = {spec[1], 0.98 * width[i] / math.max(sum, kLine)}
  end
  return tbl
end
